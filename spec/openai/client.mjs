// The official OpenAI client (npm `openai`, pinned in package.json) against `anelua serve`:
// chat and text completions, whole and streamed, parsed by the client itself. Prints one JSON
// object of what it received, for spec/serve_spec.lua to compare with curl's answers.
//   node spec/openai/client.mjs BASE_URL MODEL
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "not-needed", maxRetries: 0 });
const messages = [{ role: "user", content: "Hi there" }];
const common = { model, temperature: 0, max_tokens: 10 };

const chat = await client.chat.completions.create({ ...common, messages });
let chatStreamed = "";
let chatFinish = null;
for await (const chunk of await client.chat.completions.create({ ...common, messages, stream: true })) {
  chatStreamed += chunk.choices[0]?.delta?.content ?? "";
  chatFinish = chunk.choices[0]?.finish_reason ?? chatFinish;
}
const completion = await client.completions.create({ ...common, prompt: "Once upon a time" });
let completionStreamed = "";
let usage = null;
const stream = await client.completions.create({ ...common, prompt: "Once upon a time", stream: true,
  stream_options: { include_usage: true } });
for await (const chunk of stream) {
  completionStreamed += chunk.choices[0]?.text ?? "";
  usage = chunk.usage ?? usage;
}
let refusal = null;
try {
  await client.chat.completions.create({ ...common, messages, n: 2 });
} catch (error) {
  refusal = { status: error.status, param: error.param, message: error.message };
}
const models = await client.models.list();
console.log(JSON.stringify({
  chat: chat.choices[0].message.content, chat_finish: chat.choices[0].finish_reason, chat_usage: chat.usage,
  chat_streamed: chatStreamed, chat_streamed_finish: chatFinish,
  completion: completion.choices[0].text, completion_streamed: completionStreamed, completion_usage: usage,
  refusal, models: models.data.map((m) => m.id),
}));
