"""What the single-process Python tests share: failures collected in a list, the message of an
expected exception, and the CLI's one-line message for a command."""

import os
import subprocess

failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)


def error_of(f, kind=ValueError):
    """The message of the `kind` exception f raises; a failure (and None) when it raises none."""
    try:
        f()
    except kind as e:
        return str(e)
    failures.append(f"{f} raised no {kind.__name__}")
    return None


def cli_message(cli, *args):
    """(exit code, the message of the last line of stderr) of `CLI ARGS`, outside any MPI job."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "OPAL_", "WALLFACER_LAUNCH"))}
    p = subprocess.run([cli, *args], capture_output=True, text=True, env=env)
    line = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    return p.returncode, line.split("error: ", 1)[-1]
