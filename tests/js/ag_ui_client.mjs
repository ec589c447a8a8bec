// Issue 33 item 3: AG-UI's own JavaScript client (@ag-ui/client's HttpAgent, which verifies
// every event sequence) against a reactq pool (tests/test_ag_ui.py runs it:
// node ag_ui_client.mjs URL KEY AGENT; prints what it saw as JSON).
import { HttpAgent } from "@ag-ui/client";

const [url, key, agentName] = process.argv.slice(2);
const threadId = `agui-js-${Date.now()}`;
const agent = new HttpAgent({
  url: `${url}/ag-ui/${agentName}`,
  headers: { Authorization: `Bearer ${key}` },
  threadId,
  initialMessages: [{ id: "u1", role: "user", content: "two lamps" }],
});
const confirm = {
  name: "confirm_order",
  description: "Ask the user to confirm the order in the browser.",
  parameters: { type: "object", properties: { item: { type: "string" } } },
};

function watcher(types) {
  return { onEvent: ({ event }) => { types.push(event.type); } };
}

// A plain turn: the agent's own tool runs on the pool.
const plain = new HttpAgent({
  url: `${url}/ag-ui/${agentName}`,
  headers: { Authorization: `Bearer ${key}` },
  threadId: `${threadId}-plain`,
  initialMessages: [{ id: "u0", role: "user", content: "weather" }],
});
const plainTypes = [];
await plain.runAgent({ runId: "r0" }, watcher(plainTypes));
const plainAnswer = plain.messages.filter((m) => m.role === "assistant").map((m) => m.content).join("");

// A frontend tool: the run ends with its call, which the client answers in the next run.
const first = [];
await agent.runAgent({ runId: "r1", tools: [confirm] }, watcher(first));
const asked = agent.messages.filter((m) => m.role === "assistant" && m.toolCalls?.length);
const call = asked.at(-1).toolCalls[0];
agent.addMessage({ id: "t1", role: "tool", toolCallId: call.id, content: "yes" });
const second = [];
await agent.runAgent({ runId: "r2", tools: [confirm] }, watcher(second));
const answer = agent.messages.filter((m) => m.role === "assistant" && m.content).at(-1).content;

console.log(JSON.stringify({
  plainTypes, plainAnswer, first, second, tool: call.function.name,
  args: JSON.parse(call.function.arguments), answer,
}));
