"""Functions for run.py: one per way of writing a handler."""
import asyncio


def answer(text, history):
    """The message's text and the conversation's earlier turns."""
    print("a print goes to stderr, not into the answer")
    return f"You said {text!r}; I remember {len(history)} earlier turn(s)."


async def answer_async(message):
    """An async function given the whole message."""
    await asyncio.sleep(0)
    return {"text": "async: " + message["text"], "reply": True}


def from_venv(text):
    """Imports a package only the virtualenv has."""
    import venv_only  # noqa: PLC0415 (installed in the test's virtualenv)

    return f"{venv_only.GREETING}, {text}"


def stay_silent(text):
    """None: no reply."""
    return None
