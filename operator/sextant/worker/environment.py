"""A command handler's environment on a worker (docs/workers.md, "A command's environment"): never the worker's own
(its envFrom Secrets, its KUBECONFIG, the pod's service-account and Kubernetes variables), but

1. a minimal base taken from the worker's environment where it is set: BASE_VARIABLES and every LC_* (PATH falls
   back to DEFAULT_PATH);
2. what the worker's operator passes with `--command-env NAME` (the worker's value) or `--command-env NAME=VALUE`;
3. the attempt's SEXTANT_* variables, which nothing above can override.

Pure: the worker's environment in, the command's out. Pod mode (`sextant run` in an attempt pod) is not this: there
the pod's environment is the Handler author's own pod spec, and the command gets it whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

BASE_VARIABLES = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def base(environ: Mapping[str, str]) -> dict[str, str]:
    """The base every command gets: BASE_VARIABLES and LC_* as the worker has them, PATH at least DEFAULT_PATH."""
    found = {k: v for k, v in environ.items() if k in BASE_VARIABLES or k.startswith("LC_")}
    found.setdefault("PATH", DEFAULT_PATH)
    return found


def resolve(passed: Iterable[tuple[str, str | None]], environ: Mapping[str, str]) -> dict[str, str]:
    """--command-env entries (NAME, VALUE or None) → the variables to pass; KeyError(NAME) for a NAME the worker's
    environment lacks (its caller names the flag)."""
    out: dict[str, str] = {}
    for name, value in passed:
        if value is None:
            if name not in environ:
                raise KeyError(name)
            value = environ[name]
        out[name] = value
    return out


def command_environment(environ: Mapping[str, str], passed: Mapping[str, str],
                        variables: Mapping[str, str]) -> dict[str, str]:
    """The command's whole environment: the base, then what was passed, then the attempt's SEXTANT_* variables."""
    return {**base(environ), **passed, **variables}
