// Generated from shared/events.py by `make docs`; do not edit by hand.
// How the page shows each event type (its class's `page` view; app.js draws it).
"use strict";
const EVENT_VIEWS = {
  "queued": {"kind": "queued", "tag": "you", "template": ""},
  "started": {"kind": "started", "tag": "started", "template": ""},
  "thought": {"kind": "text", "tag": "thought", "template": "{text}"},
  "delta": {"kind": "hidden", "tag": "", "template": ""},
  "reasoning": {"kind": "hidden", "tag": "", "template": ""},
  "model_fallback": {"kind": "hidden", "tag": "", "template": ""},
  "rate_limited": {"kind": "hidden", "tag": "", "template": ""},
  "action": {"kind": "call", "tag": "tool call", "template": ""},
  "tool_progress": {"kind": "progress", "tag": "progress", "template": ""},
  "observation": {"kind": "result", "tag": "result", "template": ""},
  "tool_failed": {"kind": "text", "tag": "tool error", "template": "{tool}: {error}"},
  "file_change": {"kind": "file", "tag": "file", "template": ""},
  "todos": {"kind": "todos", "tag": "todos", "template": ""},
  "usage": {"kind": "gauge", "tag": "context", "template": ""},
  "compacted": {"kind": "hidden", "tag": "", "template": ""},
  "turns_left_out": {"kind": "left_out", "tag": "context", "template": ""},
  "guardrail": {"kind": "hidden", "tag": "", "template": ""},
  "error": {"kind": "text", "tag": "error", "template": "{code}: {message}"},
  "approval_requested": {"kind": "approval", "tag": "needs you", "template": ""},
  "approval_decided": {"kind": "decision", "tag": "", "template": ""},
  "subagent": {"kind": "tree", "tag": "", "template": ""},
  "final": {"kind": "answer", "tag": "answer", "template": ""},
};
const EVENT_BASE_FIELDS = ["v", "id", "session_id", "turn_id", "attempt", "seq", "ts", "type"];
