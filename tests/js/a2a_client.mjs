// Issue 32: A2A's own JavaScript client (@a2a-js/sdk) against a reactq pool
// (tests/test_a2a_server.py runs it: node a2a_client.mjs URL KEY AGENT; prints what it saw
// as JSON): a send continued in its context, a stream, get, and the v0.3 wire format
// through the SDK's legacy transport.
import { randomUUID } from "node:crypto";
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
} from "@a2a-js/sdk/client";

const [url, key, agent] = process.argv.slice(2);

function authed(input, init = {}) {
  const headers = new Headers(init.headers || {});
  headers.set("Authorization", `Bearer ${key}`);
  return fetch(input, { ...init, headers });
}

function factory(legacy) {
  return new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [
        new JsonRpcTransportFactory({ fetchImpl: authed, legacyCompat: { enabled: legacy } }),
      ],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl: authed }),
    }),
  );
}

function user(text, contextId = "") {
  return {
    message: {
      messageId: randomUUID(), contextId, taskId: "", role: 1,
      parts: [{ content: { $case: "text", value: text }, metadata: undefined, filename: "", mediaType: "" }],
      metadata: undefined, extensions: [], referenceTaskIds: [],
    },
    configuration: undefined, metadata: undefined, tenant: "",
  };
}

const answerOf = (task) => task.artifacts[0].parts[0].content.value;

const cardUrl = `${url}/a2a/${agent}/.well-known/agent-card.json`;
const client = await factory(false).createFromUrl(cardUrl, "");
const first = await client.sendMessage(user("hello js"));
const again = await client.sendMessage(user("more js", first.contextId));
const got = await client.getTask({ id: first.id, historyLength: undefined, tenant: "" });
const streamed = [];
let streamedAnswer = null;
for await (const part of client.sendMessageStream(user("streamed js"))) {
  streamed.push(part.payload?.$case);
  if (part.payload?.$case === "artifactUpdate") {
    streamedAnswer = part.payload.value.artifact.parts[0].content.value;
  }
}

// The v0.3 transport, chosen by the card's interface version.
const card = await new DefaultAgentCardResolver({ fetchImpl: authed }).resolve(cardUrl, "");
for (const iface of card.supportedInterfaces) iface.protocolVersion = "0.3";
const legacy = await factory(true).createFromAgentCard(card);
const old = await legacy.sendMessage(user("from 0.3"));

console.log(JSON.stringify({
  first: { state: first.status.state, answer: answerOf(first), context: first.contextId },
  again: { context: again.contextId, answer: answerOf(again) },
  got: { id: got.id, state: got.status.state },
  streamed, streamedAnswer,
  legacy: { state: old.status?.state, answer: old.artifacts ? answerOf(old) : JSON.stringify(old) },
}));
