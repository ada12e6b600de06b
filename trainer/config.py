"""YAML config files merged under command-line flags."""

import yaml

from devicekit import UsageError


def load_config(path, known_keys):
    """Read a YAML mapping of option names to values with yaml.safe_load.

    Keys may use dashes or underscores (`batch-size` or `batch_size`); every key must be
    one of `known_keys` (underscore form). Returns {key: value} in underscore form.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except FileNotFoundError:
        raise UsageError(f"--config {path!r} does not exist: check the path") from None
    except yaml.constructor.ConstructorError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise UsageError(f"--config {path!r}{where}: {error.problem}; YAML tags that build Python "
                         "objects are refused (safe_load): write plain values") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise UsageError(f"--config {path!r} is not valid YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"--config {path!r} must be a mapping of option: value, "
                         f"not a {type(data).__name__}")
    config, unknown = {}, []
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name in known_keys:
            config[name] = value
        else:
            unknown.append(str(key))
    if unknown:
        raise UsageError(f"--config {path!r} has unknown option(s): {', '.join(unknown)}; "
                         "use the long flag names without dashes in front, e.g. batch-size: 256")
    return config
