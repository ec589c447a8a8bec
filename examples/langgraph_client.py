"""A LangGraph SDK script, unchanged, against a reactq pool (the Agent Protocol).

Start a pool and its gateway (Redis on 127.0.0.1:6379; any OpenAI-compatible model
through ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``), from the repository's root::

    reactq worker --agents examples.weather:agent &
    REACTQ_API_KEYS=dev-key reactq serve &

then run it::

    python examples/langgraph_client.py --url http://127.0.0.1:8000 --key dev-key \\
        --assistant weather "What's the weather in Oslo?"

It makes a thread, streams a run (the answer's tokens as they come, each step as it
ends), reads the thread's state and history, and keeps a note in the store. Nothing in
it knows about reactq: the same script runs against LangGraph's own server.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from langgraph_sdk import get_sync_client


def main(argv: list[str] | None = None) -> int:
    """Run the script; its exit status."""
    parser = argparse.ArgumentParser(description="A LangGraph SDK script against reactq.")
    parser.add_argument("message")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--key", default=None, help="an API key of the gateway")
    parser.add_argument("--assistant", default="weather", help="a hosted agent's name")
    args = parser.parse_args(argv)

    client = get_sync_client(url=args.url, api_key=args.key)
    thread = client.threads.create(metadata={"from": "langgraph_client.py"})
    thread_id = thread["thread_id"]
    print(f"thread {thread_id}")

    for part in client.runs.stream(
        thread_id,
        args.assistant,
        input={"messages": [{"role": "user", "content": args.message}]},
        stream_mode=["updates", "messages-tuple"],
    ):
        if part.event == "updates":
            for node, update in part.data.items():
                for message in update.get("messages", []) if isinstance(update, dict) else []:
                    calls = [c["name"] for c in message.get("tool_calls") or []]
                    print(f"[{node}] {message['type']}" + (f" calls {calls}" if calls else ""))
        elif part.event == "error":
            print(f"run failed: {part.data}", file=sys.stderr)
            return 1

    state = client.threads.get_state(thread_id)
    values: Any = state["values"]  # the SDK types it as a dict or a list of them
    answer = values["messages"][-1]["content"]
    history = client.threads.get_history(thread_id)
    print(f"answer: {answer}")
    print(f"{len(values['messages'])} messages, {len(history)} checkpoint(s)")

    client.store.put_item(["notes", thread_id], "last-answer", {"text": answer})
    note = client.store.get_item(["notes", thread_id], "last-answer")
    print(json.dumps({"thread_id": thread_id, "answer": answer, "note": note["value"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
