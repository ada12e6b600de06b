"""YAML config files merged under command-line flags."""

import yaml

from devicekit import UsageError


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping that gives one key twice (plain YAML keeps the last one silently)."""


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader (the same safe_load semantics) that refuses duplicate mapping keys."""

    def construct_mapping(self, node, deep=False):
        first_line = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` may be overridden by design
            key = self.construct_object(key_node, deep=deep)
            try:
                seen = key in first_line
            except TypeError:
                continue  # an unhashable key: SafeLoader itself refuses it below
            if seen:
                raise DuplicateKeyError(
                    None,
                    None,
                    f"gives {key} twice (lines {first_line[key] + 1} and "
                    f"{key_node.start_mark.line + 1}): keep one",
                    key_node.start_mark,
                )
            first_line[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def _where(error):
    mark = getattr(error, "problem_mark", None)
    return f" at line {mark.line + 1}" if mark is not None else ""


def load_config(path, known_keys):
    """Read a YAML mapping of option names to values with safe_load semantics.

    Keys may use dashes or underscores (`batch-size` or `batch_size`); every key must be
    one of `known_keys` (underscore form) and appear once, in one spelling. Returns
    {key: value} in underscore form.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.load(handle, Loader=UniqueKeyLoader)
    except FileNotFoundError:
        raise UsageError(f"--config {path!r} does not exist: check the path") from None
    except IsADirectoryError:
        raise UsageError(f"--config {path!r} is a directory: pass a YAML file") from None
    except OSError as error:
        raise UsageError(
            f"--config {path!r} cannot be read ({error.strerror}): check its permissions"
        ) from None
    except UnicodeDecodeError as error:
        raise UsageError(
            f"--config {path!r} is not UTF-8 text ({error.reason} at byte "
            f"{error.start}): pass a YAML file"
        ) from None
    except DuplicateKeyError as error:
        raise UsageError(f"--config {path!r} {error.problem}") from None
    except yaml.constructor.ConstructorError as error:
        raise UsageError(
            f"--config {path!r}{_where(error)}: {error.problem}; YAML tags that "
            "build Python objects are refused (safe_load): write plain values"
        ) from None
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise UsageError(f"--config {path!r} is not valid YAML{_where(error)}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(
            f"--config {path!r} must be a mapping of option: value, not a {type(data).__name__}"
        )
    config, spelled, unknown = {}, {}, []
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name in spelled:
            raise UsageError(
                f"--config {path!r} gives {name.replace('_', '-')} twice (as "
                f"{spelled[name]} and {key}): keep one"
            )
        if name in known_keys:
            config[name], spelled[name] = value, key
        else:
            unknown.append(str(key))
    if unknown:
        raise UsageError(
            f"--config {path!r} has unknown option(s): {', '.join(unknown)}; "
            "use the long flag names without dashes in front, e.g. batch-size: 256"
        )
    return config
