// Renders the chat templates of spec/data/chat/templates/ (copies of models' own templates as
// llama.cpp's models/templates/ keeps them: Llama 3.2, Phi-3.5, Mistral Nemo, Qwen2.5; SmolLM2's and
// Gemma 3's as their tokenizer_config.json carries them, see the README there) and Qwen3's
// (data/tokenizers/qwen3/tokenizer_config.json) for scripted conversations with
// @huggingface/jinja, the reference implementation transformers.js uses, into
// spec/data/chat/templates/golden.json, which spec/jinja_spec.lua holds ane.jinja to.
// A developer script: the tests read the committed JSON and need no node.
//   npm install --prefix /tmp/jinja_oracle @huggingface/jinja
//   NODE_PATH=/tmp/jinja_oracle/node_modules node scripts/make_template_golden.mjs
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
const { Template } = require("@huggingface/jinja");

// The package's exports hide package.json; its main file sits in dist/ beside it.
function packageVersion(name) {
  const main = require.resolve(name);
  const root = main.slice(0, main.lastIndexOf("/dist/"));
  return JSON.parse(readFileSync(root + "/package.json", "utf8")).version;
}

const dir = "spec/data/chat/templates/";
const templates = {
  "qwen3": JSON.parse(readFileSync("data/tokenizers/qwen3/tokenizer_config.json", "utf8")).chat_template,
  "llama-3.2": readFileSync(dir + "meta-llama-Llama-3.2-3B-Instruct.jinja", "utf8"),
  "phi-3.5": readFileSync(dir + "microsoft-Phi-3.5-mini-instruct.jinja", "utf8"),
  "mistral-nemo": readFileSync(dir + "mistralai-Mistral-Nemo-Instruct-2407.jinja", "utf8"),
  "qwen2.5": readFileSync(dir + "Qwen-Qwen2.5-7B-Instruct.jinja", "utf8"),
  "smollm2": readFileSync(dir + "HuggingFaceTB-SmolLM2-135M-Instruct.jinja", "utf8"),
  "gemma-3": readFileSync(dir + "google-gemma-3-1b-it.jinja", "utf8"),
};
const specials = { bos_token: "<s>", eos_token: "</s>", date_string: "05 Dec 2026" };
const conversations = [
  { name: "one user turn", messages: [{ role: "user", content: "Hello there" }], add_generation_prompt: true },
  { name: "system, user, generation prompt", messages: [{ role: "system", content: "  You are terse.  " },
    { role: "user", content: "What is 2+2?" }], add_generation_prompt: true },
  { name: "multi-turn, finished", messages: [{ role: "user", content: "Name a colour." },
    { role: "assistant", content: "Blue." }, { role: "user", content: "Another?" },
    { role: "assistant", content: "Green." }], add_generation_prompt: false },
  { name: "a think block in an earlier answer", messages: [{ role: "user", content: "Hi" },
    { role: "assistant", content: "<think>\nThe user greets.\n</think>\n\nHello!" }, { role: "user", content: "How are you?" }],
    add_generation_prompt: true, enable_thinking: true },
  { name: "thinking off", messages: [{ role: "user", content: "Quick: 3*3?" }], add_generation_prompt: true,
    enable_thinking: false },
  { name: "unicode and newlines", messages: [{ role: "user", content: "Traduire: «ça va?»\n\tMerci 🌊" }],
    add_generation_prompt: true },
  { name: "roles that do not alternate", messages: [{ role: "user", content: "a" }, { role: "user", content: "b" }],
    add_generation_prompt: true },
  { name: "a tool result", messages: [{ role: "user", content: "Weather?" },
    { role: "tool", content: "sunny", tool_call_id: "abc123xyz" }], add_generation_prompt: true },
];
const golden = { source: "@huggingface/jinja " + packageVersion("@huggingface/jinja"),
  templates: {} };
for (const [name, source] of Object.entries(templates)) {
  const template = new Template(source);
  const cases = [];
  for (const conversation of conversations) {
    const context = { ...specials, ...conversation };
    delete context.name;
    try {
      cases.push({ name: conversation.name, context, text: template.render(context) });
    } catch (error) {
      cases.push({ name: conversation.name, context, error: String(error.message || error) });
    }
  }
  golden.templates[name] = { file: name === "qwen3" ? "data/tokenizers/qwen3/tokenizer_config.json" : null, cases };
}
writeFileSync(dir + "golden.json", JSON.stringify(golden, null, 1) + "\n");
console.log("wrote " + dir + "golden.json: " + Object.keys(templates).length + " templates x " + conversations.length + " conversations");
