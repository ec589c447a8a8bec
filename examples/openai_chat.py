"""Talk to a reactq agent through the ``openai`` SDK's Chat Completions.

Run a pool and the gateway (``reactq worker --agents examples.weather:agent`` and
``REACTQ_API_KEYS=my-key reactq serve``), then ``python examples/openai_chat.py``.
"""

from __future__ import annotations

import os
import uuid

from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("REACTQ_GATEWAY_URL", "http://localhost:8000") + "/v1",
    api_key=os.environ.get("REACTQ_API_KEY", "my-key"),
)

# Stateless: the messages are the whole conversation.
done = client.chat.completions.create(
    model="reactq/weather", messages=[{"role": "user", "content": "Weather in Paris?"}]
)
print(done.choices[0].message.content)

# A session kept server side, streamed.
session = {"X-Reactq-Session": f"demo-{uuid.uuid4().hex[:8]}"}
for question in ("Weather in Rome?", "And the day after?"):
    stream = client.chat.completions.create(
        model="reactq/weather",
        messages=[{"role": "user", "content": question}],
        stream=True,
        extra_headers=session,
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
    print()
