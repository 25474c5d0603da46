//! JSON text for `--json` output (docs/JSON.md): strings escaped, numbers finite or null.

pub fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number, or null for none (JSON has no NaN or infinity).
pub fn json_number(value: Option<f64>) -> String {
    match value {
        Some(v) if v.is_finite() => format!("{v}"),
        _ => "null".into(),
    }
}

/// A JSON object written field by field, in order.
#[derive(Default)]
pub struct Object(Vec<String>);

impl Object {
    pub fn new() -> Object {
        Object::default()
    }
    /// A field whose value is already JSON text (an object, a list).
    pub fn raw(mut self, key: &str, json: impl Into<String>) -> Object {
        self.0.push(format!("{}:{}", json_string(key), json.into()));
        self
    }
    pub fn text(self, key: &str, value: &str) -> Object {
        self.raw(key, json_string(value))
    }
    pub fn number(self, key: &str, value: impl Into<Option<f64>>) -> Object {
        self.raw(key, json_number(value.into()))
    }
    pub fn count(self, key: &str, value: u64) -> Object {
        self.raw(key, value.to_string())
    }
    pub fn flag(self, key: &str, value: bool) -> Object {
        self.raw(key, value.to_string())
    }
    pub fn build(self) -> String {
        format!("{{{}}}", self.0.join(","))
    }
}

/// A JSON list of items that are already JSON text.
pub fn json_list(items: impl IntoIterator<Item = String>) -> String {
    format!("[{}]", items.into_iter().collect::<Vec<_>>().join(","))
}
