// Issue 31: the JavaScript LangGraph SDK against a reactq pool (tests/test_agent_protocol_runs.py
// runs it: node agent_protocol_stream.mjs URL KEY AGENT; prints what it saw as JSON).
import { Client } from "@langchain/langgraph-sdk";
const [url, key, agent] = process.argv.slice(2);
const client = new Client({ apiUrl: url, defaultHeaders: { Authorization: `Bearer ${key}` } });
const thread = await client.threads.create({ metadata: { from: "js" } });
const seen = [];
let last = null;
for await (const part of client.runs.stream(thread.thread_id, agent, {
  input: { messages: [{ role: "user", content: "from js" }] },
  streamMode: ["values", "messages-tuple"],
})) {
  seen.push(part.event);
  if (part.event === "values") last = part.data;
}
const state = await client.threads.getState(thread.thread_id);
console.log(JSON.stringify({ seen, last: last.messages.map((m) => m.type), state: state.values.messages.map((m) => m.type) }));
