-- tensor/storage.c: heap blocks, the large-block pool's reuse (zeroed again), file
-- mappings, and giving a mapping's read pages back (resident memory from /proc/self/statm).
local ane = require("ane")
local helpers = require("spec.helpers")

describe("storage", function()
  it("makes zeros from reused large blocks too", function()
    for _, n in ipairs({ 9 * 1048576, 17 * 524288 }) do -- 36 MB, then 34 MB (within the reuse margin)
      local used = ane.tensor({ n }):fill(7)
      assert.are.equal(7, used:get(n))
      used = nil
      collectgarbage()
      collectgarbage()
      local fresh = ane.tensor({ n })
      assert.are.equal(0, fresh:sum_of_squares())
    end
  end)

  it("maps a file: tensors are views of its bytes, ranges beyond it are refused by name", function()
    local values = { 1.5, -2.25, 3.0, 0.125, 1e-3, -7.0 }
    local path = helpers.tmpdir() .. "/mapped.bin"
    helpers.write_file(path, "HEAD" .. string.pack("<" .. string.rep("f", #values), table.unpack(values)))
    local mapping = assert(ane._io.map_file(path))
    local t = assert(mapping:tensor(path, "weights", "F32", { 2, 3 }, 4, 4 + 24)) -- after a 4-byte header
    assert.are.same({ 2, 3 }, t:shape())
    for i, v in ipairs(values) do
      local as_stored = string.unpack("<f", string.pack("<f", v)) -- the fp32 value written
      assert.are.equal(as_stored, t:get((i - 1) // 3 + 1, (i - 1) % 3 + 1))
    end
    local none, err = mapping:tensor(path, "beyond", "F32", { 2, 4 }, 4, 4 + 32)
    assert.is_nil(none)
    assert.matches("mapped%.bin", err)
    assert.matches("beyond", err)
    local missing, why = ane._io.map_file(path .. ".absent")
    assert.is_nil(missing)
    assert.matches("mapped%.bin%.absent", why)
  end)

  -- Interned weights (tensor/intern.c) are shared by content: the next load of the same bytes
  -- compares its tensors with them. A model loaded in place keeps its file mapped; when that
  -- file is cut short meanwhile, its pages past the new end fault any reader (SIGBUS, the
  -- process gone): the comparison must leave such an entry alone.
  it("loads weights again while an earlier mapping of them has been cut short", function()
    local llama = require("ane.models.llama")
    local bytes = helpers.read_file(helpers.root .. "/spec/data/reference/llama-tiny/model.bin")
    local first_path, second_path = helpers.tmpdir() .. "/first.bin", helpers.tmpdir() .. "/second.bin"
    helpers.write_file(first_path, bytes)
    local first = assert(llama.load(first_path, { precision = "fp32", profile = "cpu" }))
    local ids = { 1, 2, 3, 4, 5, 6, 7, 8 }
    local want = first:logits(ids):bytes()
    helpers.write_file(first_path, bytes:sub(1, 1000)) -- the first model's own file, cut (it stays loaded)
    helpers.write_file(second_path, bytes)
    local second = assert(llama.load(second_path, { precision = "fp32", profile = "cpu" }))
    assert.are.equal(want, second:logits(ids):bytes())
    assert.is_not_nil(first) -- (alive throughout: its mapping is the interned one)
  end)

  it("gives back the pages a mapped tensor has read, and reads the same bytes again", function()
    local function resident_mb() -- the second field of statm: resident pages
      local f = io.open("/proc/self/statm")
      if not f then return nil end
      local pages = tonumber(f:read("a"):match("^%d+%s+(%d+)"))
      f:close()
      return pages * 4096 / 2 ^ 20
    end
    if not resident_mb() then return pending("no /proc/self/statm on this system") end
    local n = 8 * 1048576 -- 32 MB of fp32
    local path = helpers.tmpdir() .. "/pages.bin"
    helpers.write_file(path, ane.tensor.randn({ n }, { seed = 5 }):bytes())
    local mapping = assert(ane._io.map_file(path))
    local t = assert(mapping:tensor(path, "all", "F32", { n }, 0, 4 * n))
    local before = resident_mb()
    local sum = t:sum_of_squares() -- reads every page
    local read = resident_mb()
    t:release_pages()
    local released = resident_mb()
    -- reading brought in ~32 MB; giving them back drops nearly all of it (the allowance:
    -- other allocations of this process between the readings)
    assert.is_true(read - before > 28, string.format("reading made %.1f MB resident", read - before))
    assert.is_true(read - released > 28, string.format("release gave back %.1f MB", read - released))
    assert.are.equal(sum, t:sum_of_squares()) -- the same bytes, read again from the file
  end)
end)
