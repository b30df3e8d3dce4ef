-- ane.jinja against the reference: seven models' own chat templates (Qwen3 from its
-- tokenizer_config.json; Llama 3.2, Phi-3.5, Mistral Nemo and Qwen2.5 as llama.cpp's
-- models/templates/ keeps them; SmolLM2 and Gemma 3 as their tokenizer_config.json does) rendered for eight scripted conversations by @huggingface/jinja
-- (spec/data/chat/templates/golden.json, scripts/make_template_golden.mjs). Every render must
-- match byte for byte, and a template's raise_exception must surface as its message. Then the
-- language pieces those templates do not reach, each against what Jinja2 documents.
local cjson = require("cjson")
local helpers = require("spec.helpers")
local jinja = require("ane.jinja")

local dir = helpers.root .. "/spec/data/chat/templates/"
local golden = cjson.decode(helpers.read_file(dir .. "golden.json"))
local files = {
  ["llama-3.2"] = dir .. "meta-llama-Llama-3.2-3B-Instruct.jinja",
  ["phi-3.5"] = dir .. "microsoft-Phi-3.5-mini-instruct.jinja",
  ["mistral-nemo"] = dir .. "mistralai-Mistral-Nemo-Instruct-2407.jinja",
  ["qwen2.5"] = dir .. "Qwen-Qwen2.5-7B-Instruct.jinja",
  ["smollm2"] = dir .. "HuggingFaceTB-SmolLM2-135M-Instruct.jinja",
  ["gemma-3"] = dir .. "google-gemma-3-1b-it.jinja",
}

local function template_source(name)
  if name == "qwen3" then
    local config = helpers.read_file(helpers.root .. "/data/tokenizers/qwen3/tokenizer_config.json")
    return cjson.decode(config).chat_template
  end
  return helpers.read_file(files[name])
end

for name, entry in pairs(golden.templates) do
  describe("the " .. name .. " chat template", function()
    local template = assert(jinja.compile(template_source(name)))
    for _, case in ipairs(entry.cases) do
      it("renders '" .. case.name .. "' as " .. golden.source .. " does", function()
        local text, err = template:render(case.context)
        if case.error then
          assert.is_nil(text)
          assert.matches(case.error, err, 1, true)
        else
          assert.is_nil(err)
          assert.are.equal(case.text, text)
        end
      end)
    end
  end)
end

local function render(source, context)
  local template, err = jinja.compile(source)
  if not template then return nil, err end
  return template:render(context or {})
end

describe("the Jinja subset", function()
  it("trims a block's newline and its line's leading space, as transformers configures", function()
    assert.are.equal("a\nb\n", render("{% for x in xs %}\n  {% if x %}\n{{ x }}\n  {% endif %}\n{% endfor %}",
      { xs = { "a", "b" } }))
  end)

  it("reads loop variables, slices and negative indexes", function()
    assert.are.equal("1/3 c,b,a first:a last:c",
      render("{{ loop_test }}{% for x in xs %}{% if loop.first %}{{ loop.index }}/{{ loop.length }}{% endif %}{% endfor %}"
        .. " {{ xs[::-1] | join(',') }} first:{{ xs[0] }} last:{{ xs[-1] }}", { xs = { "a", "b", "c" } }))
  end)

  it("keeps a namespace's assignments out of a loop's scope", function()
    assert.are.equal("3 0", render("{% set ns = namespace(n=0) %}{% set m = 0 %}{% for i in range(3) %}"
      .. "{% set ns.n = ns.n + 1 %}{% set m = m + 1 %}{% endfor %}{{ ns.n }} {{ m }}"))
  end)

  it("applies Python's string methods and integer division", function()
    assert.are.equal("ab|A,B|True|3|-4|2.5", render(
      "{{ '  ab '.strip() }}|{{ 'a,b'.upper().split(',') | join(',') }}|{{ 'think'.startswith('th') }}"
      .. "|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 5 / 2 }}"))
  end)

  it("writes tojson as Python's json.dumps does for strings and lists", function()
    assert.are.equal('["a\\"b", 1, true, null]', render("{{ xs | tojson }}", { xs = jinja.list({ 'a"b', 1, true, jinja.NONE }) }))
  end)

  it("names the line of a syntax error and of an unknown filter", function()
    local _, err = render("line one\n{% if %}")
    assert.matches("line 2", err, 1, true)
    local _, err2 = render("{{ x | frobnicate }}", { x = 1 })
    assert.matches("frobnicate", err2, 1, true)
  end)

  it("reports raise_exception's message and no text", function()
    local text, err = render("{{ raise_exception('roles must alternate') }}")
    assert.is_nil(text)
    assert.matches("roles must alternate", err, 1, true)
  end)
end)
