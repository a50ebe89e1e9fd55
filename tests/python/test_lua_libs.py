"""The libraries scripts see, against a real redis-server, function by function: cjson,
cmsgpack, bit, struct and redis.*, their results and their error texts (Redis's Lua
libraries did not change from 7.0 to 7.2). Each expression runs in a script on both servers;
what it returns (or the error it raises, its text without the script's location) must be
the same."""

import re

import pytest
import redis

from test_differential import real_redis  # noqa: F401  (the fixture)

# Each: a Lua expression; its value is returned through `show`, which turns any Lua value
# into a string the same way on both servers (tables with their keys sorted).
SHOW = r"""
local function show(v, depth)
  depth = depth or 0
  local t = type(v)
  if t == 'table' then
    if depth > 4 then return '{...}' end
    local keys = {}
    for k in pairs(v) do table.insert(keys, k) end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    local parts = {}
    for _, k in ipairs(keys) do
      table.insert(parts, tostring(k) .. '=' .. show(v[k], depth + 1))
    end
    return '{' .. table.concat(parts, ',') .. '}'
  elseif t == 'string' then
    return string.format('%%q', v)
  elseif t == 'userdata' then
    return 'userdata:' .. tostring(v == cjson.null)
  end
  return t .. ':' .. tostring(v)
end
local results = {pcall(function() return %s end)}
local out = {}
for i = 1, table.maxn(results) do out[i] = show(results[i]) end
return table.concat(out, ' | ')
"""

EXPRESSIONS = {
    "cjson": [
        "cjson.encode({1, 2, 3})", "cjson.encode({a = 1})", "cjson.encode({})",
        "cjson.encode('a/b\"c\\\\d\\n\\1\\127é')", "cjson.encode(1/3)", "cjson.encode(1e15)",
        "cjson.encode(123456789012345)", "cjson.encode(0.0)", "cjson.encode(12.5)",
        "cjson.encode(1e300 * 1e10)", "cjson.encode(0/0)", "cjson.encode({[1] = 1, [3] = 3})",
        "cjson.encode({[1] = 1, [20] = 3})", "cjson.encode({[1.5] = 1})", "cjson.encode({[true] = 1})",
        "cjson.encode(function() end)", "cjson.encode(cjson.null)", "cjson.encode(nil)",
        "cjson.encode({x = {y = {1, {z = false}}}})", "cjson.encode(true)", "cjson.encode({[2] = 'b'})",
        "cjson.decode('[1,2,3]')", "cjson.decode('{\"a\":[true,false,null]}')", "cjson.decode('\"\\\\u00e9\\\\ud83d\\\\ude00\"')",
        "cjson.decode('1e2')", "cjson.decode(' -0 ')", "cjson.decode('01')", "cjson.decode('0x10')",
        "cjson.decode('')", "cjson.decode('x')", "cjson.decode('[1,]')", "cjson.decode('{\"a\" 1}')",
        "cjson.decode('{1:2}')", "cjson.decode('[1 2]')", "cjson.decode('\"abc')", "cjson.decode('\"\\\\q\"')",
        "cjson.decode('[1] x')", "cjson.decode('nan')", "cjson.decode('inf')", "cjson.decode('Infinity')",
        "cjson.decode('{\"a\":1,\"a\":2}')", "cjson.decode('\"a\\tb\"')", "cjson.decode(string.rep('[', 1001) .. string.rep(']', 1001))",
        "cjson.decode(123)", "cjson.decode(1000000000000001)", "cjson.decode()", "cjson.encode()", "cjson.encode(1, 2)",
        "cjson._NAME", "cjson._VERSION", "cjson.encode_max_depth()", "cjson.decode_max_depth()",
        "cjson.encode_number_precision()", "cjson.encode_sparse_array()", "cjson.encode_keep_buffer()",
        "cjson.encode_invalid_numbers()", "cjson.decode_invalid_numbers()",
        "cjson.encode_number_precision(20)", "cjson.encode_max_depth(0)", "cjson.encode_keep_buffer('maybe')",
        "(function() local c = cjson.new() c.encode_number_precision(3) return c.encode(1/3), cjson.encode(1/3) end)()",
        "(function() local c = cjson.new() c.encode_sparse_array(true) return c.encode({[1] = 1, [20] = 3}) end)()",
        "(function() local c = cjson.new() c.encode_invalid_numbers('null') return c.encode({0/0, 1/0}) end)()",
        "(function() local c = cjson.new() c.encode_invalid_numbers(true) return c.encode({0/0, 1/0, -1/0}) end)()",
        "(function() local c = cjson.new() c.decode_invalid_numbers(false) return c.decode('[nan]') end)()",
        "(function() local c = cjson.new() c.encode_max_depth(2) return c.encode({{{1}}}) end)()",
        "(function() local c = cjson.new() c.decode_max_depth(2) return c.decode('[[[1]]]') end)()",
        "(function() local c = cjson.new() return c.encode_keep_buffer(false), c.encode_keep_buffer('on') end)()",
    ],
    "cmsgpack": [
        "cmsgpack.pack(1, -1, 127, 128, 255, 256, 65535, 65536, -32, -33, -129, -32769, 4294967296, -2147483649)",
        "cmsgpack.pack(1.5, 0.1, 1e300, 'abc', string.rep('x', 40), string.rep('x', 300), true, false, nil)",
        "cmsgpack.pack({1, 2, 3}, {a = 1}, {}, {[1] = 1, [3] = 3})",
        "cmsgpack.unpack(cmsgpack.pack({1, {a = 'b'}, 'x'}))", "cmsgpack.unpack(cmsgpack.pack(1, 2, 3))",
        "cmsgpack.unpack('\\196')", "cmsgpack.unpack('\\193')", "cmsgpack.unpack('')",
        "cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3))", "cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 1)",
        "cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 2)", "cmsgpack.unpack_one(cmsgpack.pack(1), 5)",
        "cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2)", "cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2, 1)",
        "cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 0)", "cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), -1)",
        "cmsgpack._NAME", "cmsgpack._VERSION", "cmsgpack._COPYRIGHT", "cmsgpack._DESCRIPTION",
        "cmsgpack.pack()", "cmsgpack.unpack(cmsgpack.pack(0/0)) ~= cmsgpack.unpack(cmsgpack.pack(0/0))",
    ],
    "bit": [
        "bit.tobit(0xffffffff)", "bit.tobit(2^32 + 5)", "bit.tobit(-1)", "bit.tobit(1.5)", "bit.tobit(2.5)",
        "bit.tobit('10')", "bit.tobit('x')", "bit.bnot(0)", "bit.band(0xff, 0x0f, 0x3)", "bit.bor(1, 2, 4)",
        "bit.bxor(5, 3)", "bit.lshift(1, 31)", "bit.lshift(1, 33)", "bit.rshift(-1, 28)", "bit.arshift(-256, 4)",
        "bit.rol(0x12345678, 8)", "bit.ror(0x12345678, 8)", "bit.bswap(0x12345678)", "bit.tohex(255)",
        "bit.tohex(255, 2)", "bit.tohex(255, -4)", "bit.tohex(-1)", "bit.tohex(0x12345678, 12)", "bit.band()",
    ],
    "struct": [
        "struct.pack('>i2', 258)", "struct.pack('<i4', -2)", "struct.pack('bBhH', -1, 255, -2, 65534)",
        "struct.pack('>I3', 70000)", "struct.pack('d', 1.5)", "struct.pack('>f', 0.5)", "struct.pack('s', 'ab')",
        "struct.pack('c3', 'abcdef')", "struct.pack('c0', 'abc')", "struct.pack('!4 b i4', 1, 2)", "struct.pack('>l', -3)",
        "struct.pack('xb', 7)", "struct.pack('c5', 'ab')", "struct.pack('y', 1)", "struct.pack('i33', 1)",
        "struct.pack('!3 i', 1)", "struct.pack('i')",
        "struct.unpack('>i2', '\\1\\2')", "struct.unpack('<I4', '\\255\\255\\255\\255')", "struct.unpack('<i4', '\\254\\255\\255\\255')",
        "struct.unpack('s', 'ab\\0cd')", "struct.unpack('b c0', '\\3abcd')", "struct.unpack('c0', 'abc')",
        "struct.unpack('>d', struct.pack('>d', 0.25))", "struct.unpack('i4', 'ab')", "struct.unpack('s', 'abc')",
        "struct.unpack('b', '\\1\\2\\3', 2)", "struct.unpack('b', '\\1', 5)", "struct.unpack('!4 b i4', struct.pack('!4 b i4', 1, 2))",
        "struct.pack('s', 1000000000000001)", "struct.size('bhi4d')", "struct.size('!8 b d')", "struct.size('s')", "struct.size('c0')", "struct.size('c7')",
    ],
    "redis": [
        "redis.sha1hex('abc')", "redis.sha1hex(1000000000000001)", "redis.status_reply('X')", "redis.error_reply('bad')", "redis.error_reply('-bad')",
        "redis.LOG_WARNING", "redis.LOG_NOTICE", "redis.LOG_VERBOSE", "redis.LOG_DEBUG", "redis.REPL_ALL",
        "redis.REPL_NONE", "redis.REPL_AOF", "redis.REPL_REPLICA", "redis.REPL_SLAVE", "redis.replicate_commands()",
        "redis.setresp(4)", "redis.log(redis.LOG_NOTICE, 'hello from a script')", "redis.log(99, 'x')",
        "redis.set_repl(redis.REPL_ALL)", "redis.set_repl(99)", "redis.acl_check_cmd('get', 'x')",
        "redis.acl_check_cmd('nosuchcommand')", "redis.breakpoint()", "redis.debug('x')", "redis.sha1hex()",
    ],
}


def evaluate(port, expression):
    client = redis.Redis(port=port)
    try:
        reply = client.eval(SHOW % expression, 0)
    except redis.ResponseError as e:
        reply = str(e)
    text = reply.decode(errors="backslashreplace") if isinstance(reply, bytes) else reply
    # Error texts carry where they arose: the script's hash and line, and Lua's chunk names.
    text = re.sub(r"script: [0-9a-f]{40}, on @user_script:\d+\.", "", text)
    return re.sub(r"(user_script|\[string \"[^\"]*\"\]):\d+: ", "", text)


@pytest.mark.parametrize("family", sorted(EXPRESSIONS))
def test_libraries_match_redis(server, real_redis, family):  # noqa: F811
    for expression in EXPRESSIONS[family]:
        assert evaluate(server.port, expression) == evaluate(real_redis, expression), expression


def test_library_tables_can_be_walked(server, real_redis):  # noqa: F811
    # Redis's library tables are read-only, yet pairs() walks them.
    script = "local n = 0 for _ in pairs(%s) do n = n + 1 end return n"
    for table in ["redis", "cjson", "cmsgpack", "bit", "struct", "string", "math", "table"]:
        theirs = redis.Redis(port=real_redis).eval(script % table, 0)
        assert redis.Redis(port=server.port).eval(script % table, 0) == theirs, table


# Whole scripts, run by a RESP2 and a RESP3 client on both servers: how errors travel
# (pcall's text, error tables, redis.pcall's table), and redis.setresp(3)'s conversions
# both ways (RESP3 replies as typed tables, typed tables as RESP3 replies).
SCRIPTS = [
    "error({err=5})",
    "local x = 1\nerror({err='E2 two'})",
    "local t = setmetatable({}, {__index=function() return 'E9 meta' end}) error(t)",
    "local ok, e = pcall(error, {x=1}) return type(e)",
    "local ok, e = pcall(error, {err='E3 caught'}) return {tostring(ok), type(e), e}",
    "local ok, e = pcall(redis.call, 'incr', KEYS[1]) return {tostring(ok), type(e), e}",
    "local ok, e = pcall(function() return redis.call('incr', KEYS[1]) end) return {type(e), e}",
    "return {xpcall(function() redis.call('incr', KEYS[1]) end,"
    " function(e) return type(e) .. ':' .. tostring(e.err) end)}",
    "local e = redis.pcall('incr', KEYS[1]) local ks = {}"
    " for k, v in pairs(e) do table.insert(ks, k .. '=' .. tostring(v)) end table.sort(ks) return ks",
    "return redis.pcall('incr', KEYS[1])",
    "return redis.call('incr', KEYS[1])",
    "error('plain')", "error('plain', 0)", "error('plain', 2)",
    "redis.setresp(3) return redis.call('hgetall', KEYS[2])",
    "redis.setresp(3) local r = redis.call('hgetall', KEYS[2]) return {type(r), type(r.map), r.map.a}",
    "redis.setresp(3) local r = redis.call('zscore', KEYS[3], 'm') return {type(r), tostring(r.double)}",
    "redis.setresp(3) return type(redis.call('get', 'lualib:nosuch'))",
    "redis.setresp(3) local r = redis.call('smembers', KEYS[4]) return {type(r), tostring(r.set.q)}",
    "redis.setresp(3) local r = redis.call('zrange', KEYS[3], 0, -1, 'withscores')"
    " return {type(r[1]), tostring(r[1][2].double)}",
    "redis.setresp(3) return redis.call('zrange', KEYS[3], 0, -1, 'withscores')",
    "redis.setresp(3) return true", "redis.setresp(3) return false", "return false", "return true",
    "redis.setresp(3) return redis.call('exists', KEYS[1]) == 1",
    "return {double=3.5}", "return {map={a=1}}", "return {set={x=true}}",
    "return {verbatim_string={format='txt', string='hi'}}", "return {ok='a\\r\\nb'}",
    "redis.setresp(2) return redis.call('hgetall', KEYS[2])",
    "redis.setresp()", "redis.setresp('x')",
]


def run_script(port, protocol, script):
    client = redis.Redis(port=port, protocol=protocol)
    keys = ["lualib:s", "lualib:h", "lualib:z", "lualib:st"]
    client.delete(*keys)
    client.set(keys[0], "x")
    client.hset(keys[1], mapping={"a": 1, "b": 2})
    client.zadd(keys[2], {"m": 1.5, "n": 2})
    client.sadd(keys[3], "q")
    try:
        reply = client.eval(script, len(keys), *keys)
    except redis.ResponseError as e:
        reply = "error: " + str(e)
    return reply if isinstance(reply, str) else repr(reply)


@pytest.mark.parametrize("protocol", [2, 3])
def test_script_errors_and_resp3_match_redis(server, real_redis, protocol):  # noqa: F811
    for script in SCRIPTS:
        ours = run_script(server.port, protocol, script)
        assert ours == run_script(real_redis, protocol, script), script


# FUNCTION LOAD's rules: what a library's code sees while it loads (only `redis` with
# register_function, log and the version constants), the texts of compile and load errors,
# and function names without regard to case across libraries.
LIBRARIES = [
    "#!lua name=lib3\nerror('boom')",
    "#!lua name=lib3\nmath.random()",
    "#!lua name=lib3\nlocal n = 0 for k in pairs(redis) do n = n + 1 end",
    "#!lua name=lib3\nx = 1",
    "#!lua name=lib3\nreturn 1 +",
    "#!lua name=lib3\nlocal x = \nredis.register_function('f3', function() end)",
    "#!lua name=lib3\nredis.call('ping')",
    "#!lua name=lib3\nredis.register_function('bad-name', function() end)",
    "#!lua name=lib3\nredis.register_function('', function() end)",
    "#!lua name=lib3\nredis.register_function('f5')",
    "#!lua name=lib3\nredis.register_function('f5', 'notfn')",
    "#!lua name=lib3\nredis.register_function{function_name='f4', callback=function() end, flags={'bad'}}",
    "#!lua name=lib3\nredis.log(99, 'x')",
    "#!lua name=lib3\nredis.register_function('f', function() return redis.REDIS_VERSION_NUM > 0 end)",
    "#!lua name=lib-3\nredis.register_function('f', function() end)",
    "#!lua name=lib3 foo=bar\nredis.register_function('f', function() end)",
    "#!js name=lib3\nredis.register_function('f', function() end)",
    "#!lua name=lib3\nwhile true do end",
]


def function_replies(port):
    client = redis.Redis(port=port)

    def reply(*args):
        try:
            return repr(client.execute_command(*args))
        except redis.ResponseError as e:
            return "error: " + str(e)

    out = []
    for code in LIBRARIES:
        client.function_flush()
        out.append(reply("FUNCTION", "LOAD", code))
    client.function_flush()
    out.append(reply("FUNCTION", "LOAD",
                     "#!lua name=lib1\nredis.register_function('MyFunc', function() return 'hi' end)"))
    for args in [("FCALL", "myfunc", 0), ("FCALL", "MYFUNC", 0), ("FCALL_RO", "myfunc", 0),
                 ("FUNCTION", "LOAD", "#!lua name=lib2\nredis.register_function('myFUNC', function() end)"),
                 ("FUNCTION", "LOAD", "#!lua name=lib1\nreturn 1 +"),
                 ("FUNCTION", "DELETE", "LIB1"), ("FCALL", "nosuch", 0)]:
        out.append(reply(*args))
    client.function_flush()
    return out


def test_function_rules_match_redis(server, real_redis):  # noqa: F811
    ours, theirs = function_replies(server.port), function_replies(real_redis)
    for code, mine, redis_s in zip(LIBRARIES + ["..."] * 8, ours, theirs):
        assert mine == redis_s, code
