"""YAML config files merged under command-line flags: reading one (safe_load, each key
once), and its values as command-line tokens placed before the real command line."""

import argparse

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


def config_argv(parser: argparse.ArgumentParser, path: str) -> list[str]:
    """The YAML config at `path` as command-line tokens of `parser`'s flags, for the real
    command line to follow (and so win): every key one of its flags' destinations but
    help and config, every value checked against the flag's type and choices."""
    known = {action.dest for action in parser._actions if action.dest not in ("help", "config")}
    return _tokens(parser, load_config(path, known), path)


def _tokens(parser, config, path):
    """The config's values as command-line tokens, placed before the real command line so
    that a flag given there wins. Each value is checked against its flag's type and
    choices here, so that a bad one is named with the file and key (argparse's message
    would name neither)."""
    tokens = []
    for key, value in config.items():
        key = "data" if key == "data_dir" else key
        where = f"--config {path!r}: {key.replace('_', '-')}:"
        actions = [
            action for action in parser._actions if action.dest == key and action.option_strings
        ]
        switches = [action for action in actions if action.nargs == 0]  # --x / --no-x
        if switches:
            if not isinstance(value, bool):
                raise UsageError(f"{where} {value!r} is not true or false")
            tokens += [_long_flag(action) for action in switches if action.const is value][:1]
        elif value is not None and isinstance(actions[0].nargs, int):  # --x A B: a list
            tokens += [_long_flag(actions[0]), *_config_list(actions[0], value, where)]
        elif value is not None:
            if isinstance(value, dict) or (
                isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value)
            ):
                raise UsageError(
                    f"{where} {value!r} is not a value for a flag: write a "
                    "number, a word or a list of them"
                )
            if actions[0].type is None and not isinstance(value, str):  # a path, a name
                raise UsageError(
                    f"{where} {value!r} is not text: give {_long_flag(actions[0])} a string "
                    "(in quotes where YAML would read a number or true/false)"
                )
            text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
            _check_config_value(actions[0], text, value, where)
            tokens.append(f"{_long_flag(actions[0])}={text}")
    return tokens


def _config_list(action, value, where):
    """The tokens for a flag that takes ``action.nargs`` values, from a YAML list."""
    if not isinstance(value, list) or len(value) != action.nargs:
        raise UsageError(
            f"{where} {value!r} is not a list of {action.nargs} values, "
            f"[{', '.join(action.metavar)}]"
        )
    texts = [str(item) for item in value]
    for text, item in zip(texts, value, strict=False):
        _check_config_value(action, text, item, where)
    return texts


_TYPE_NAMES = {int: "an int", float: "a number"}


def _check_config_value(action, text, value, where):
    """Refuse `value` (given as `text`) where `action`'s type or choices would."""
    try:
        converted = action.type(text) if action.type else text
    except (argparse.ArgumentTypeError, TypeError, ValueError) as error:
        reason = (
            f"{value!r} is not {_TYPE_NAMES[action.type]}"
            if action.type in _TYPE_NAMES
            else str(error)
        )
        raise UsageError(f"{where} {reason}") from None
    if action.choices is not None and converted not in action.choices:
        raise UsageError(f"{where} {value!r} is not one of {', '.join(action.choices)}")


def _long_flag(action):
    return next(
        (flag for flag in action.option_strings if flag.startswith("--")), action.option_strings[0]
    )
