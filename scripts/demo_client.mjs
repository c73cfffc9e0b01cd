// The demo's client: the official openai package (installed by setup.sh)
// streaming a chat completion from `tern serve`, then a second turn.
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
const OpenAI = require("../third_party/npm/node_modules/openai").default;

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "none" });
const messages = [{ role: "user", content: "What is the capital of France?" }];
for (let turn = 1; turn <= 2; turn++) {
  const stream = await client.chat.completions.create({
    messages, max_tokens: 32, stream: true, stream_options: { include_usage: true }, enable_thinking: false,
  });
  let text = "";
  let usage;
  process.stdout.write(`--- turn ${turn} (random weights, so random text):\n`);
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta?.content ?? "";
    process.stdout.write(d);
    text += d;
    usage = chunk.usage ?? usage;
  }
  process.stdout.write(`\n--- usage: ${JSON.stringify(usage)}\n`);
  messages.push({ role: "assistant", content: text }, { role: "user", content: "And of Germany?" });
}
