// Issue 31: the JavaScript LangGraph SDK's whole scenario against a reactq pool
// (tests/test_agent_protocol_modes.py runs it: node agent_protocol_scenario.mjs URL KEY AGENT;
// its last line is what it saw, as JSON).
import { Client } from "@langchain/langgraph-sdk";

const [url, key, agent] = process.argv.slice(2);
const client = new Client({ apiUrl: url, defaultHeaders: { Authorization: `Bearer ${key}` } });
const human = (content) => ({ messages: [{ role: "user", content }] });
const types = (values) => values.messages.map((m) => m.type);
const statusOf = async (promise) => {
  try {
    await promise;
    return 200;
  } catch (error) {
    return error.status;
  }
};
const seen = {};
const tag = `js-${Date.now()}`;

// A thread, a run streamed with values + messages-tuple, its state and history.
const thread = await client.threads.create({ metadata: { tag } });
const tid = thread.thread_id;
let last = null;
let tokens = 0;
let runId = null;
for await (const part of client.runs.stream(tid, agent, {
  input: human("weather"),
  streamMode: ["values", "messages-tuple"],
  onRunCreated: (run) => (runId = run.run_id),
})) {
  if (part.event === "values") last = part.data;
  if (part.event === "messages") tokens += 1;
}
seen.streamed = types(last);
seen.tokens = tokens;
seen.state = types((await client.threads.getState(tid)).values);
seen.history = (await client.threads.getHistory(tid)).length;

// Joined after a disconnect with Last-Event-ID: nothing missed, nothing twice.
const whole = [];
for await (const part of client.runs.joinStream(tid, runId, { streamMode: "values" })) {
  whole.push([part.event, part.id ?? null]);
}
const first = [];
const controller = new AbortController();
try {
  for await (const part of client.runs.joinStream(tid, runId, {
    streamMode: "values",
    signal: controller.signal,
  })) {
    first.push([part.event, part.id ?? null]);
    if (first.length === 2) controller.abort();
  }
} catch (error) {
  if (error.name !== "AbortError") throw error;
}
const rest = [];
for await (const part of client.runs.joinStream(tid, runId, {
  streamMode: "values",
  lastEventId: first[first.length - 1][1],
})) {
  rest.push([part.event, part.id ?? null]);
}
seen.resumed = JSON.stringify(first.concat(rest));
seen.whole = JSON.stringify(whole);

// Double-texting: reject refuses while a run is going, enqueue runs after it.
const busy = await client.runs.create(tid, agent, { input: human("sleep=0.5 busy") });
seen.rejected = await statusOf(
  client.runs.create(tid, agent, { input: human("no"), multitaskStrategy: "reject" }),
);
const queued = await client.runs.create(tid, agent, {
  input: human("later"),
  multitaskStrategy: "enqueue",
});
seen.enqueued = types(await client.runs.join(tid, queued.run_id));

// interrupt: the running run stops, the new one runs.
const old = await client.runs.create(tid, agent, { input: human("sleep=0.5 old") });
await new Promise((r) => setTimeout(r, 300));
const fresh = await client.runs.create(tid, agent, {
  input: human("sleep=0.1 new"),
  multitaskStrategy: "interrupt",
});
await client.runs.join(tid, fresh.run_id);
seen.interrupted = (await client.runs.get(tid, old.run_id)).status;

// A cancel.
const slow = await client.runs.create(tid, agent, { input: human("sleep=0.5 slow") });
await new Promise((r) => setTimeout(r, 300));
await client.runs.cancel(tid, slow.run_id, true);
seen.cancelled = (await client.runs.get(tid, slow.run_id)).status;
void busy;

// Threads found by metadata.
seen.found = (await client.threads.search({ metadata: { tag } })).length;

// The store.
await client.store.putItem(["js", tag], "prefs", { colour: "blue" });
seen.item = (await client.store.getItem(["js", tag], "prefs")).value;

// A cron on the thread: created, found, deleted.
const cron = await client.crons.createForThread(tid, agent, {
  schedule: "0 3 * * *",
  input: human("nightly"),
});
const crons = await client.crons.search({ threadId: tid });
seen.cron = crons.some((c) => c.cron_id === cron.cron_id);
await client.crons.delete(cron.cron_id);
seen.crons_after_delete = (await client.crons.search({ threadId: tid })).length;

await client.threads.delete(tid);
console.log(JSON.stringify(seen));
