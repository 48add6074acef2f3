#!/usr/bin/env python3
"""Run a Python function as a Molecule Relay exec: handler.

    MOLECULE_HANDLER='exec:python3 examples/python-function/run.py mymodule:answer'

MODULE:FUNCTION names the function: a module importable from the relay's
working directory (or PYTHONPATH, or the virtualenv), or a file
(path/to/agent.py:answer). With VIRTUAL_ENV in the handler's environment
(MOLECULE_HANDLER_ENV=VIRTUAL_ENV), run.py runs under that virtualenv's
python, so the function imports the virtualenv's packages.

The function's parameters are filled by name from the payload on stdin:
text (the message's text), message (the whole message: text, attachments,
sender...), history (earlier turns, oldest first), conversation, payload
(all of it). A single parameter of another name gets the message. It may be
async. What it returns is the answer: a str is posted as text, None posts
nothing, a dict is printed as JSON (a structured answer, with
MOLECULE_HANDLER_ANSWER=json). What it prints goes to stderr, so it never
mixes with the answer. An exception exits 1: the relay retries the message,
then dead-letters it with the end of the traceback.
"""
import asyncio
import contextlib
import importlib
import importlib.util
import inspect
import json
import os
import sys

NAMED = ("text", "message", "history", "conversation", "payload")


def use_virtualenv():
    """Re-run under $VIRTUAL_ENV's python unless already running there."""
    venv = os.environ.get("VIRTUAL_ENV")
    if not venv or os.path.realpath(sys.prefix) == os.path.realpath(venv):
        return
    python = os.path.join(venv, "bin", "python")
    if not os.access(python, os.X_OK):
        sys.exit(f"run.py: VIRTUAL_ENV={venv} has no bin/python")
    os.execv(python, [python, *sys.argv])


def load(spec):
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        sys.exit(f"run.py: {spec!r} is not MODULE:FUNCTION (e.g. mymodule:answer)")
    if where.endswith(".py"):
        mod_spec = importlib.util.spec_from_file_location(os.path.basename(where)[:-3], where)
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        module = importlib.import_module(where)
    fn = getattr(module, name, None)
    if not callable(fn):
        sys.exit(f"run.py: {where} has no function {name}")
    return fn


def arguments(fn, payload):
    message = payload.get("message") or {}
    values = {"text": message.get("text", ""), "message": message, "history": payload.get("history") or [],
              "conversation": payload.get("conversation", ""), "payload": payload}
    params = list(inspect.signature(fn).parameters)
    if len(params) == 1 and params[0] not in NAMED:
        return [message], {}
    return [], {p: values[p] for p in params if p in values}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: run.py MODULE:FUNCTION (the payload JSON on stdin)")
    use_virtualenv()
    payload = json.load(sys.stdin)
    fn = load(sys.argv[1])
    args, kwargs = arguments(fn, payload)
    with contextlib.redirect_stdout(sys.stderr):
        answer = fn(*args, **kwargs)
        if inspect.iscoroutine(answer):
            answer = asyncio.run(answer)
    if answer is None:
        return
    if isinstance(answer, dict):
        answer = json.dumps(answer)
    sys.stdout.write(str(answer))


if __name__ == "__main__":
    main()
