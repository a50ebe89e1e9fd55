//! `bit` (LuaBitOp 1.0.2: 32-bit operations on Lua numbers) and `struct` (Roberto
//! Ierusalimschy's struct library, as Redis embeds it: `pack`, `unpack`, `size` with the
//! formats `> < ! x b B h H l L T i I f d s c`), with their results and error texts.
//! Failures come back as `(FAIL, message)` for `libs`' wrappers to raise, as `cjson`'s do.

use mlua::{Lua, MultiValue, Table, Value};

use super::coerce::{fail, ok, LibResult};
use super::coerce::{string_arg, type_name};

/// Largest integer size `struct` takes (`i32` and the like).
const INT_SIZE_MAX: usize = 32;
/// The platform's largest alignment (`!` without a number).
const ALIGN_MAX: usize = 8;

/// A number argument as `luaL_checknumber` takes it (a numeric string too).
fn number_arg(args: &MultiValue, i: usize, function: &str) -> Result<f64, String> {
    let value = args.get(i);
    value.and_then(super::coerce::lua_tonumber).ok_or_else(|| {
        format!(
            "bad argument #{} to '{function}' (number expected, got {})",
            i + 1,
            value.map_or("no value", type_name)
        )
    })
}

/// LuaBitOp's normalisation: the number's low 32 bits as a signed integer (rounding as
/// adding 2^52 + 2^51 does).
fn tobit(n: f64) -> i32 {
    let shifted = n + 6_755_399_441_055_744.0;
    shifted.to_bits() as u32 as i32
}

fn bit_result(lua: &Lua, n: i32) -> LibResult {
    ok(lua, vec![Value::Number(n as f64)])
}

/// A `bit` operation on one number, on a running value and the next, or a shift.
type Unary = fn(i32) -> i32;
type Fold = fn(i32, i32) -> i32;
type Shift = fn(i32, u32) -> i32;

/// The `bit` table.
// Long: one registration per `bit.*` function, each a line or two; the table reads best whole.
pub fn bit(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let unary: [(&str, Unary); 3] = [
        ("tobit", |x| x),
        ("bnot", |x| !x),
        ("bswap", |x| x.swap_bytes()),
    ];
    for (name, op) in unary {
        t.set(
            name,
            lua.create_function(
                move |lua, args: MultiValue| match number_arg(&args, 0, name) {
                    Ok(x) => bit_result(lua, op(tobit(x))),
                    Err(e) => fail(lua, &e),
                },
            )?,
        )?;
    }
    let folds: [(&str, Fold); 3] = [
        ("band", |a, b| a & b),
        ("bor", |a, b| a | b),
        ("bxor", |a, b| a ^ b),
    ];
    for (name, op) in folds {
        t.set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                let mut acc = match number_arg(&args, 0, name) {
                    Ok(x) => tobit(x),
                    Err(e) => return fail(lua, &e),
                };
                for i in 1..args.len() {
                    match number_arg(&args, i, name) {
                        Ok(x) => acc = op(acc, tobit(x)),
                        Err(e) => return fail(lua, &e),
                    }
                }
                bit_result(lua, acc)
            })?,
        )?;
    }
    let shifts: [(&str, Shift); 5] = [
        ("lshift", |x, n| ((x as u32) << n) as i32),
        ("rshift", |x, n| ((x as u32) >> n) as i32),
        ("arshift", |x, n| x >> n),
        ("rol", |x, n| (x as u32).rotate_left(n) as i32),
        ("ror", |x, n| (x as u32).rotate_right(n) as i32),
    ];
    for (name, op) in shifts {
        t.set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                match (number_arg(&args, 0, name), number_arg(&args, 1, name)) {
                    (Ok(x), Ok(n)) => bit_result(lua, op(tobit(x), tobit(n) as u32 & 31)),
                    (Err(e), _) | (_, Err(e)) => fail(lua, &e),
                }
            })?,
        )?;
    }
    t.set(
        "tohex",
        lua.create_function(|lua, args: MultiValue| {
            let x = match number_arg(&args, 0, "tohex") {
                Ok(x) => tobit(x) as u32,
                Err(e) => return fail(lua, &e),
            };
            let n = match args.get(1) {
                None | Some(Value::Nil) => 8,
                _ => match number_arg(&args, 1, "tohex") {
                    Ok(n) => tobit(n),
                    Err(e) => return fail(lua, &e),
                },
            };
            let upper = n < 0;
            let digits = n.unsigned_abs().min(8) as usize;
            let text = if upper {
                format!("{x:08X}")
            } else {
                format!("{x:08x}")
            };
            ok(
                lua,
                vec![Value::String(lua.create_string(&text[8 - digits..])?)],
            )
        })?,
    )?;
    Ok(t)
}

// ---- struct ----

#[derive(Clone, Copy)]
struct Header {
    little: bool,
    align: usize,
}

impl Default for Header {
    fn default() -> Header {
        Header {
            little: cfg!(target_endian = "little"),
            align: 1,
        }
    }
}

/// A format string being read, one option at a time.
struct Format<'a> {
    text: &'a [u8],
    at: usize,
    function: &'static str,
}

impl Format<'_> {
    fn next(&mut self) -> Option<u8> {
        let c = *self.text.get(self.at)?;
        self.at += 1;
        Some(c)
    }

    fn number(&mut self, default: usize) -> Result<usize, String> {
        if !self.text.get(self.at).is_some_and(u8::is_ascii_digit) {
            return Ok(default);
        }
        let mut n: usize = 0;
        while let Some(d) = self.text.get(self.at).filter(|b| b.is_ascii_digit()) {
            let digit = (d - b'0') as usize;
            if n > (i32::MAX as usize) / 10 || n * 10 > i32::MAX as usize - digit {
                return Err("integral size overflow".into());
            }
            n = n * 10 + digit;
            self.at += 1;
        }
        Ok(n)
    }

    /// An option's size (0 for those with none).
    fn size(&mut self, option: u8) -> Result<usize, String> {
        Ok(match option {
            b'B' | b'b' => 1,
            b'H' | b'h' => 2,
            b'L' | b'l' | b'T' | b'd' => 8,
            b'f' => 4,
            b'x' => 1,
            b'c' => self.number(1)?,
            b'i' | b'I' => {
                let size = self.number(4)?;
                if size > INT_SIZE_MAX {
                    return Err(format!(
                        "integral size {size} is larger than limit of {INT_SIZE_MAX}"
                    ));
                }
                size
            }
            _ => 0,
        })
    }

    /// The control options (`> < ! space`); anything else is an invalid option.
    fn control(&mut self, option: u8, h: &mut Header) -> Result<(), String> {
        match option {
            b' ' => Ok(()),
            b'>' => {
                h.little = false;
                Ok(())
            }
            b'<' => {
                h.little = true;
                Ok(())
            }
            b'!' => {
                let a = self.number(ALIGN_MAX)?;
                if !a.is_power_of_two() {
                    return Err(format!("alignment {a} is not a power of 2"));
                }
                h.align = a;
                Ok(())
            }
            other => Err(format!(
                "bad argument #1 to '{}' (invalid format option '{}')",
                self.function, other as char
            )),
        }
    }
}

fn padding(len: usize, h: &Header, option: u8, size: usize) -> usize {
    if size == 0 || option == b'c' {
        return 0;
    }
    let size = size.min(h.align);
    (size - (len & (size - 1))) & (size - 1)
}

fn put_integer(out: &mut Vec<u8>, n: f64, little: bool, size: usize) {
    let mut value: u64 = if n < 0.0 { n as i64 as u64 } else { n as u64 };
    let mut bytes = vec![0u8; size];
    if little {
        for b in bytes.iter_mut() {
            *b = value as u8;
            value = value.checked_shr(8).unwrap_or(0);
        }
    } else {
        for b in bytes.iter_mut().rev() {
            *b = value as u8;
            value = value.checked_shr(8).unwrap_or(0);
        }
    }
    out.extend_from_slice(&bytes);
}

fn get_integer(bytes: &[u8], little: bool, signed: bool) -> f64 {
    let mut l: u64 = 0;
    let ordered: Box<dyn Iterator<Item = &u8>> = if little {
        Box::new(bytes.iter().rev())
    } else {
        Box::new(bytes.iter())
    };
    for b in ordered {
        l = (l << 8) | *b as u64;
    }
    if !signed {
        return l as f64;
    }
    let bits = bytes.len() * 8;
    if (1..=64).contains(&bits) {
        let mask = u64::MAX << (bits - 1);
        if l & mask != 0 {
            l |= mask;
        }
    }
    l as i64 as f64
}

fn pack(args: &MultiValue) -> Result<Vec<u8>, String> {
    let text = string_arg(args, 0, "pack")?;
    // The C function pushes a nil after its arguments (a mark before its buffer): a missing
    // first argument is that nil.
    let mut args = args.clone();
    args.push_back(Value::Nil);
    let args = &args;
    let mut fmt = Format {
        text: &text,
        at: 0,
        function: "pack",
    };
    let mut h = Header::default();
    let mut out = Vec::new();
    let mut arg = 1;
    while let Some(option) = fmt.next() {
        let mut size = fmt.size(option)?;
        let pad = padding(out.len(), &h, option, size);
        out.extend(std::iter::repeat_n(0u8, pad));
        match option {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = number_arg(args, arg, "pack")?;
                arg += 1;
                put_integer(&mut out, n, h.little, size);
            }
            b'x' => out.push(0),
            b'f' => {
                let f = number_arg(args, arg, "pack")? as f32;
                arg += 1;
                out.extend_from_slice(&if h.little {
                    f.to_le_bytes()
                } else {
                    f.to_be_bytes()
                });
            }
            b'd' => {
                let d = number_arg(args, arg, "pack")?;
                arg += 1;
                out.extend_from_slice(&if h.little {
                    d.to_le_bytes()
                } else {
                    d.to_be_bytes()
                });
            }
            b'c' | b's' => {
                let s = string_arg(args, arg, "pack")?;
                arg += 1;
                if size == 0 {
                    size = s.len();
                }
                if s.len() < size {
                    // (Redis's struct checks after moving to the next argument.)
                    return Err(format!(
                        "bad argument #{} to 'pack' (string too short)",
                        arg + 1
                    ));
                }
                out.extend_from_slice(&s[..size]);
                if option == b's' {
                    out.push(0);
                }
            }
            other => fmt.control(other, &mut h)?,
        }
    }
    Ok(out)
}

// Long: one arm per `struct` format character, as lua-struct reads each; the table reads best whole.
fn unpack(lua: &Lua, args: &MultiValue) -> Result<Vec<Value>, String> {
    let text = string_arg(args, 0, "unpack")?;
    let data = string_arg(args, 1, "unpack")?;
    let start = match args.get(2) {
        None | Some(Value::Nil) => 1.0,
        _ => number_arg(args, 2, "unpack")?,
    };
    // An unsigned position, as the C one: a negative offset is huge (the data is too short).
    let start = start as i64;
    if start == 0 {
        return Err("bad argument #3 to 'unpack' (offset must be 1 or greater)".into());
    }
    let mut pos = start.wrapping_sub(1) as usize;
    let mut fmt = Format {
        text: &text,
        at: 0,
        function: "unpack",
    };
    let mut h = Header::default();
    let mut values: Vec<Value> = Vec::new();
    let short = || "bad argument #2 to 'unpack' (data string too short)".to_string();
    while let Some(option) = fmt.next() {
        let mut size = fmt.size(option)?;
        pos = pos.wrapping_add(padding(pos, &h, option, size));
        if size > data.len() || pos > data.len() - size {
            return Err(short());
        }
        match option {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let signed = option.is_ascii_lowercase();
                values.push(Value::Number(get_integer(
                    &data[pos..pos + size],
                    h.little,
                    signed,
                )));
            }
            b'x' => {}
            b'f' => {
                let bytes: [u8; 4] = data[pos..pos + 4].try_into().expect("4 bytes");
                let f = if h.little {
                    f32::from_le_bytes(bytes)
                } else {
                    f32::from_be_bytes(bytes)
                };
                values.push(Value::Number(f as f64));
            }
            b'd' => {
                let bytes: [u8; 8] = data[pos..pos + 8].try_into().expect("8 bytes");
                let d = if h.little {
                    f64::from_le_bytes(bytes)
                } else {
                    f64::from_be_bytes(bytes)
                };
                values.push(Value::Number(d));
            }
            b'c' => {
                if size == 0 {
                    size = match values.pop() {
                        Some(Value::Number(n)) => n as usize,
                        _ => return Err("format 'c0' needs a previous size".into()),
                    };
                    if size > data.len() || pos > data.len() - size {
                        return Err(short());
                    }
                }
                values.push(Value::String(
                    lua.create_string(&data[pos..pos + size])
                        .map_err(|e| e.to_string())?,
                ));
            }
            b's' => {
                let Some(end) = data[pos..].iter().position(|&b| b == 0) else {
                    return Err("unfinished string in data".into());
                };
                size = end + 1;
                values.push(Value::String(
                    lua.create_string(&data[pos..pos + end])
                        .map_err(|e| e.to_string())?,
                ));
            }
            other => fmt.control(other, &mut h)?,
        }
        pos = pos.wrapping_add(size);
    }
    values.push(Value::Number(pos.wrapping_add(1) as i64 as f64));
    Ok(values)
}

fn size(args: &MultiValue) -> Result<usize, String> {
    let text = string_arg(args, 0, "size")?;
    let mut fmt = Format {
        text: &text,
        at: 0,
        function: "size",
    };
    let mut h = Header::default();
    let mut pos = 0;
    while let Some(option) = fmt.next() {
        let size = fmt.size(option)?;
        pos += padding(pos, &h, option, size);
        if option == b's' {
            return Err("bad argument #1 to 'size' (option 's' has no fixed size)".into());
        }
        if option == b'c' && size == 0 {
            return Err("bad argument #1 to 'size' (option 'c0' has no fixed size)".into());
        }
        if !option.is_ascii_alphanumeric() {
            fmt.control(option, &mut h)?;
        }
        pos += size;
    }
    Ok(pos)
}

/// The `struct` table.
pub fn structs(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "pack",
        lua.create_function(|lua, args: MultiValue| match pack(&args) {
            Ok(bytes) => ok(lua, vec![Value::String(lua.create_string(&bytes)?)]),
            Err(e) => fail(lua, &e),
        })?,
    )?;
    t.set(
        "unpack",
        lua.create_function(|lua, args: MultiValue| match unpack(lua, &args) {
            Ok(values) => ok(lua, values),
            Err(e) => fail(lua, &e),
        })?,
    )?;
    t.set(
        "size",
        lua.create_function(|lua, args: MultiValue| match size(&args) {
            Ok(n) => ok(lua, vec![Value::Number(n as f64)]),
            Err(e) => fail(lua, &e),
        })?,
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tobit_keeps_the_low_32_bits() {
        assert_eq!(tobit(4294967295.0), -1);
        assert_eq!(tobit(4294967301.0), 5);
        assert_eq!(tobit(-1.0), -1);
        assert_eq!(tobit(1.5), 2);
        assert_eq!(tobit(2.5), 2);
    }

    #[test]
    fn integers_round_trip_in_both_byte_orders() {
        for little in [true, false] {
            for size in [1usize, 2, 3, 4, 8] {
                let mut out = Vec::new();
                put_integer(&mut out, -2.0, little, size);
                assert_eq!(get_integer(&out, little, true), -2.0, "{size} {little}");
            }
        }
    }
}
