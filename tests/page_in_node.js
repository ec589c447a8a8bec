// The gateway's page in Node (tests/test_events.py): events.js and app.js on a small
// stand-in for the DOM (enough for the timeline), each event of INPUT (a JSON list)
// rendered; prints what the timeline then holds, the page's drawings and the kinds its
// table names, as JSON.  Usage: node page_in_node.js EVENTS_JS APP_JS INPUT
"use strict";
const fs = require("fs"), vm = require("vm");
const [events, app, input] = process.argv.slice(2);
class Node_ {
  constructor(tag, text) {
    this.tag = tag; this.children = []; this.dataset = {}; this.className = "";
    this.textContent = text === undefined ? "" : text; this.value = "";
    this.classList = { contains: (c) => this.className.split(" ").includes(c),
                       add: (c) => { this.className += " " + c; } };
  }
  append(...nodes) {
    for (const n of nodes) this.children.push(typeof n === "string" ? new Node_("#text", n) : n);
  }
  replaceChildren() { this.children = []; }
  addEventListener() {}
  querySelector() { return null; }
  querySelectorAll() { return []; }
  checkValidity() { return true; }
  get text() { return this.textContent + this.children.map((c) => c.text).join(""); }
}
const byId = {};
const storage = () => ({ getItem: () => null, setItem() {}, removeItem() {} });
const context = {
  document: {
    getElementById: (id) => (byId[id] = byId[id] || new Node_("div")),
    createElement: (tag) => new Node_(tag),
    createTextNode: (text) => new Node_("#text", text),
  },
  localStorage: storage(), sessionStorage: storage(), location: { search: "" },
  CSS: { escape: (s) => s }, URLSearchParams, console,
};
context.window = context;
vm.createContext(context);
vm.runInContext(fs.readFileSync(events, "utf8"), context, { filename: "events.js" });
vm.runInContext(fs.readFileSync(app, "utf8"), context, { filename: "app.js" });
for (const ev of JSON.parse(fs.readFileSync(input, "utf8"))) context.render(ev);
const rows = [];
for (const turn of byId.timeline.children)
  for (const row of turn.children.slice(1))
    rows.push({
      cls: row.className,
      tag: row.children[0].text,
      text: row.children.slice(1).map((c) => c.text).join(""),
    });
const views = vm.runInContext("Object.keys(VIEWS)", context);
const kinds = vm.runInContext("Object.values(EVENT_VIEWS).map((v) => v.kind)", context);
console.log(JSON.stringify({ rows, views, kinds, debug: "reactqDebug" in context }));
