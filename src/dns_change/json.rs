//! The little JSON that a platform's DNS settings are kept in (GKE's kube-dns `stubDomains`,
//! OpenShift's `spec.servers`, the EKS add-on's `configurationValues`): read into a [`Value`]
//! that keeps the order of keys, and written back compactly.
//!
//! Only what those settings hold: objects, arrays, strings, numbers, `true`, `false`, `null`.
//! A number is kept as written. Nesting is bounded (32 levels); anything else is refused
//! with the byte offset. Text in, text out; nothing here knows about platforms.

use super::ChangeError;

/// Deeper than any DNS setting; bounds the recursion on hostile input.
const MAX_DEPTH: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(String),
    String(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

impl Value {
    /// The value under `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The strings of an array (others skipped).
    pub fn strings(&self) -> Vec<&str> {
        match self {
            Value::Array(items) => items
                .iter()
                .filter_map(|v| match v {
                    Value::String(s) => Some(s.as_str()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn fail(&self, what: &str) -> ChangeError {
        ChangeError::Json(format!("{what} at byte {}", self.at))
    }

    fn skip_space(&mut self) {
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), ChangeError> {
        self.skip_space();
        if self.bytes.get(self.at) != Some(&byte) {
            return Err(self.fail(&format!("expected '{}'", byte as char)));
        }
        self.at += 1;
        Ok(())
    }

    /// Whether the next byte (after space) is `byte`; consumed when it is.
    fn eat(&mut self, byte: u8) -> bool {
        self.skip_space();
        let found = self.bytes.get(self.at) == Some(&byte);
        self.at += usize::from(found);
        found
    }

    fn value(&mut self, depth: usize) -> Result<Value, ChangeError> {
        if depth > MAX_DEPTH {
            return Err(self.fail("nested too deep"));
        }
        self.skip_space();
        match self.bytes.get(self.at) {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(Value::String),
            Some(_) => self.word(),
            None => Err(self.fail("unexpected end")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, ChangeError> {
        self.at += 1;
        let mut entries = Vec::new();
        if self.eat(b'}') {
            return Ok(Value::Object(entries));
        }
        loop {
            self.skip_space();
            let key = self.string()?;
            self.expect(b':')?;
            entries.push((key, self.value(depth + 1)?));
            if !self.eat(b',') {
                self.expect(b'}')?;
                return Ok(Value::Object(entries));
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, ChangeError> {
        self.at += 1;
        let mut items = Vec::new();
        if self.eat(b']') {
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            if !self.eat(b',') {
                self.expect(b']')?;
                return Ok(Value::Array(items));
            }
        }
    }

    fn string(&mut self) -> Result<String, ChangeError> {
        if self.bytes.get(self.at) != Some(&b'"') {
            return Err(self.fail("expected a string"));
        }
        self.at += 1;
        let mut out = String::new();
        let bytes = self.bytes;
        let mut chars = std::str::from_utf8(&bytes[self.at..])
            .map_err(|_| self.fail("not UTF-8"))?
            .char_indices();
        while let Some((offset, c)) = chars.next() {
            match c {
                '"' => {
                    self.at += offset + 1;
                    return Ok(out);
                }
                '\\' => {
                    let escaped = match chars.next().map(|(_, e)| e) {
                        Some('n') => '\n',
                        Some('t') => '\t',
                        Some('r') => '\r',
                        Some(e @ ('"' | '\\' | '/')) => e,
                        Some('u') => {
                            let hex: String = (0..4)
                                .filter_map(|_| chars.next())
                                .map(|(_, h)| h)
                                .collect();
                            u32::from_str_radix(&hex, 16)
                                .ok()
                                .and_then(char::from_u32)
                                .ok_or_else(|| self.fail("a \\u escape that is no character"))?
                        }
                        _ => return Err(self.fail("an unknown escape")),
                    };
                    out.push(escaped);
                }
                c if (c as u32) < 0x20 => return Err(self.fail("a control character in a string")),
                c => out.push(c),
            }
        }
        Err(self.fail("an unterminated string"))
    }

    fn word(&mut self) -> Result<Value, ChangeError> {
        let start = self.at;
        while self
            .bytes
            .get(self.at)
            .is_some_and(|b| b.is_ascii_alphanumeric() || b"+-.".contains(b))
        {
            self.at += 1;
        }
        let word = std::str::from_utf8(&self.bytes[start..self.at]).unwrap_or_default();
        match word {
            "null" => Ok(Value::Null),
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ if is_number(word) => Ok(Value::Number(word.to_string())),
            _ => Err(self.fail("not a JSON value")),
        }
    }
}

/// A JSON number as written: digits with a sign, a fraction and an exponent, never `nan` or
/// `inf`, which Rust's float parser takes and JSON does not.
fn is_number(word: &str) -> bool {
    word.starts_with(|c: char| c == '-' || c.is_ascii_digit())
        && word
            .bytes()
            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
        && word.parse::<f64>().is_ok()
}

/// Parse a whole document; blank text is `None` (a setting not present yet).
pub fn parse(text: &str) -> Result<Option<Value>, ChangeError> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let mut reader = Reader {
        bytes: text.as_bytes(),
        at: 0,
    };
    let value = reader.value(0)?;
    reader.skip_space();
    if reader.at != text.len() {
        return Err(reader.fail("text after the value"));
    }
    Ok(Some(value))
}

/// `text` as a JSON string literal, quotes included.
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `value` written compactly, with a space after `:` and `,` for reading.
pub fn write(value: &Value) -> String {
    let join = |parts: Vec<String>| parts.join(", ");
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.clone(),
        Value::String(s) => quote(s),
        Value::Array(items) => format!("[{}]", join(items.iter().map(write).collect())),
        Value::Object(entries) => format!(
            "{{{}}}",
            join(
                entries
                    .iter()
                    .map(|(k, v)| format!("{}: {}", quote(k), write(v)))
                    .collect()
            )
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_read_back_as_written_keeping_key_order() {
        let text = r#"{"b": ["10.0.0.1", "10.0.0.2:53"], "a": {"n": 1.5, "t": true, "z": null}}"#;
        let value = parse(text).unwrap().unwrap();
        assert_eq!(write(&value), text);
        assert_eq!(
            value.get("b").unwrap().strings(),
            ["10.0.0.1", "10.0.0.2:53"]
        );
    }

    #[test]
    fn escapes_round_trip() {
        let value = parse(r#""a\"b\\c\nd\u0041""#).unwrap().unwrap();
        assert_eq!(value, Value::String("a\"b\\c\ndA".to_string()));
        assert_eq!(quote("a\"b\\c\nd\u{1}"), r#""a\"b\\c\nd\u0001""#);
    }

    #[test]
    fn blank_text_is_no_setting_and_garbage_is_refused_with_its_offset() {
        assert_eq!(parse("  \n").unwrap(), None);
        for bad in [
            "{",
            "[1,]",
            "{\"a\" 1}",
            "\"open",
            "tru",
            "[] x",
            "\"\\q\"",
            "nan",
            "-inf",
            "1e",
        ] {
            assert!(matches!(parse(bad), Err(ChangeError::Json(_))), "{bad}");
        }
        let deep = "[".repeat(100);
        assert!(matches!(parse(&deep), Err(ChangeError::Json(_))));
    }
}
