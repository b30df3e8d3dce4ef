// The peer side of scripts/bench/tokenizer: gpt-3-encoder on node. The text is encoded in
// chunks of about 8 KB cut after a newline (gpt-3-encoder slows down quadratically on
// multi-megabyte strings; anelua gets the very same chunks). Best of 3 runs.
// Prints "<file> <bytes> <tokens> <seconds>" per file.
const fs = require("fs");
const { encode } = require("gpt-3-encoder");
function chunks(text) {
  const out = [];
  let start = 0;
  while (start < text.length) {
    let end = Math.min(start + 8192, text.length);
    const newline = text.indexOf("\n", end);
    end = newline < 0 ? text.length : newline + 1;
    out.push(text.slice(start, end));
    start = end;
  }
  return out;
}
for (const path of process.argv.slice(2)) {
  const text = fs.readFileSync(path, "utf8");
  const pieces = chunks(text);
  let best = Infinity, tokens = 0;
  for (let run = 0; run < 3; run++) {
    const start = process.hrtime.bigint();
    tokens = 0;
    for (const piece of pieces) tokens += encode(piece).length;
    best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e9);
  }
  console.log(`${path} ${Buffer.byteLength(text)} ${tokens} ${best}`);
}
