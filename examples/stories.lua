-- Generate a story: `anelua run` (lua/ane/commands/run.lua) under this name, with 64 tokens by
-- default. Any model anelua loads: a llama2.c checkpoint (Stories15M/42M/110M) with the
-- tokenizer.bin or tokenizer.model beside it, a Hugging Face directory of any family, an
-- llm.c GPT-2 file.
--   anelua examples/stories.lua MODEL.bin|MODEL_DIR [--tokenizer FILE] [--prompt TEXT]
--          [--max-tokens N] [--temperature T] [--top-k K] [--seed S] [--quantize int8|int4] ...
--          (--help: all options)
local run = require("ane.commands.run")
run.run(run.command("examples/stories.lua", "MODEL.bin|MODEL_DIR [options]", 64), arg)
