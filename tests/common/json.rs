//! A small JSON reader for the tests of `bench --json` and `soak --json`: strict about what it
//! reads (no trailing commas, no NaN), and a check of the schema both share (docs/JSON.md).

#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(f64),
    Text(String),
    List(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    pub fn get(&self, key: &str) -> &Json {
        match self {
            Json::Object(fields) => {
                fields.iter().find(|(k, _)| k == key).map(|(_, v)| v).unwrap_or_else(|| {
                    panic!("no field {key:?} in {self:?}");
                })
            }
            other => panic!("{other:?} is not an object (looking for {key:?})"),
        }
    }
    pub fn number(&self) -> Option<f64> {
        match self {
            Json::Number(n) => Some(*n),
            Json::Null => None,
            other => panic!("{other:?} is neither a number nor null"),
        }
    }
    pub fn list(&self) -> &[Json] {
        match self {
            Json::List(items) => items,
            other => panic!("{other:?} is not a list"),
        }
    }
    pub fn flag(&self) -> bool {
        match self {
            Json::Bool(b) => *b,
            other => panic!("{other:?} is not true or false"),
        }
    }
    /// The field at a path of keys: `json.at(&["details", "checked"])`.
    pub fn at(&self, path: &[&str]) -> &Json {
        path.iter().fold(self, |json, key| json.get(key))
    }
    pub fn text(&self) -> &str {
        match self {
            Json::Text(s) => s,
            other => panic!("{other:?} is not a string"),
        }
    }
}

/// A small JSON reader: enough for the bench's output, strict about what it reads.
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    pub fn parse(text: &str) -> Result<Json, String> {
        let mut reader = Reader { bytes: text.as_bytes(), at: 0 };
        let value = reader.value()?;
        reader.space();
        if reader.at != reader.bytes.len() {
            return Err(format!("trailing text at byte {}", reader.at));
        }
        Ok(value)
    }
    fn space(&mut self) {
        while self.bytes.get(self.at).is_some_and(|b| b.is_ascii_whitespace()) {
            self.at += 1;
        }
    }
    fn expect(&mut self, byte: u8) -> Result<(), String> {
        self.space();
        if self.bytes.get(self.at) == Some(&byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(format!("expected '{}' at byte {}", byte as char, self.at))
        }
    }
    fn word(&mut self, word: &str, value: Json) -> Result<Json, String> {
        if self.bytes[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(format!("bad literal at byte {}", self.at))
        }
    }
    fn value(&mut self) -> Result<Json, String> {
        self.space();
        match self.bytes.get(self.at) {
            Some(b'n') => self.word("null", Json::Null),
            Some(b't') => self.word("true", Json::Bool(true)),
            Some(b'f') => self.word("false", Json::Bool(false)),
            Some(b'"') => self.string().map(Json::Text),
            Some(b'[') => {
                self.at += 1;
                let mut items = Vec::new();
                self.space();
                if self.bytes.get(self.at) == Some(&b']') {
                    self.at += 1;
                    return Ok(Json::List(items));
                }
                loop {
                    items.push(self.value()?);
                    self.space();
                    match self.bytes.get(self.at) {
                        Some(b',') => self.at += 1,
                        Some(b']') => {
                            self.at += 1;
                            return Ok(Json::List(items));
                        }
                        _ => return Err(format!("expected ',' or ']' at byte {}", self.at)),
                    }
                }
            }
            Some(b'{') => {
                self.at += 1;
                let mut fields = Vec::new();
                self.space();
                if self.bytes.get(self.at) == Some(&b'}') {
                    self.at += 1;
                    return Ok(Json::Object(fields));
                }
                loop {
                    self.space();
                    let key = self.string()?;
                    self.expect(b':')?;
                    fields.push((key, self.value()?));
                    self.space();
                    match self.bytes.get(self.at) {
                        Some(b',') => self.at += 1,
                        Some(b'}') => {
                            self.at += 1;
                            return Ok(Json::Object(fields));
                        }
                        _ => return Err(format!("expected ',' or '}}' at byte {}", self.at)),
                    }
                }
            }
            Some(b'-' | b'0'..=b'9') => {
                let start = self.at;
                while self
                    .bytes
                    .get(self.at)
                    .is_some_and(|b| matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                {
                    self.at += 1;
                }
                let text = std::str::from_utf8(&self.bytes[start..self.at]).unwrap();
                text.parse().map(Json::Number).map_err(|_| format!("bad number {text:?}"))
            }
            _ => Err(format!("unexpected byte at {}", self.at)),
        }
    }
    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = String::new();
        loop {
            let rest = std::str::from_utf8(&self.bytes[self.at..]).map_err(|e| e.to_string())?;
            let mut chars = rest.chars();
            match chars.next() {
                None => return Err("unterminated string".into()),
                Some('"') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some('\\') => {
                    let escaped = chars.next().ok_or("unterminated escape")?;
                    self.at += 2;
                    match escaped {
                        '"' | '\\' | '/' => out.push(escaped),
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'u' => {
                            let hex = rest.get(2..6).ok_or("short \\u escape")?;
                            let code = u32::from_str_radix(hex, 16).map_err(|e| e.to_string())?;
                            out.push(char::from_u32(code).ok_or("bad \\u escape")?);
                            self.at += 4;
                        }
                        other => return Err(format!("unknown escape \\{other}")),
                    }
                }
                Some(c) if (c as u32) < 0x20 => return Err("control character in a string".into()),
                Some(c) => {
                    out.push(c);
                    self.at += c.len_utf8();
                }
            }
        }
    }
}

/// The reader's own test (called from one test binary).
pub fn check_the_reader() {
    let value = Reader::parse(r#" {"a": [1, -2.5e3, true, null], "b": "x\"\u0041"} "#).unwrap();
    assert_eq!(value.get("b").text(), "x\"A");
    assert_eq!(
        value.get("a"),
        &Json::List(vec![Json::Number(1.0), Json::Number(-2500.0), Json::Bool(true), Json::Null])
    );
    for bad in ["{\"a\":1.0.0}", "[1,]", "{\"a\" 1}", "\"open", "1 2", "{\"v\":NaN}"] {
        assert!(Reader::parse(bad).is_err(), "{bad} was read");
    }
}

/// Checks what every `bench --json` and `soak --json` document holds (docs/JSON.md, schema 1)
/// and that its numbers agree with each other; returns the rows.
pub fn check_schema<'a>(report: &'a Json, command: &str) -> &'a [Json] {
    assert_eq!(report.get("schema").number(), Some(1.0), "schema");
    assert_eq!(report.get("command").text(), command);
    assert_eq!(report.get("jitbridge").text(), env!("CARGO_PKG_VERSION"));
    let date = report.get("date").text();
    let shape = date.bytes().enumerate().all(|(i, b)| match i {
        4 | 7 => b == b'-',
        10 => b == b'T',
        13 | 16 => b == b':',
        19 => b == b'Z',
        _ => b.is_ascii_digit(),
    });
    assert!(date.len() == 20 && shape, "date {date:?} is not YYYY-MM-DDTHH:MM:SSZ");
    assert!(report.get("seconds").number().is_some_and(|s| s > 0.0), "seconds");
    let host = report.get("host");
    assert!(host.get("cores").number().is_some_and(|n| n >= 1.0), "host cores");
    assert!(host.get("os").text().starts_with("Linux"), "host os");
    assert!(host.get("memory_bytes").number().is_some_and(|n| n > 0.0), "host memory");
    host.get("cpu").text();
    let device = report.get("device");
    for key in ["spec", "backend", "name", "arch"] {
        assert!(!device.get(key).text().is_empty(), "device {key}");
    }
    assert!(device.get("memory_bytes").number().is_some(), "device memory");
    assert!(matches!(report.get("options"), Json::Object(_)), "options");
    let rows = report.get("rows").list();
    assert!(!rows.is_empty(), "no rows");
    let (mut judged, mut missed) = (0, 0);
    for row in rows {
        let measure = format!("{} / {}", row.get("section").text(), row.get("measure").text());
        let Some(value) = row.get("value").number() else {
            // A skipped row (a tool it needs is missing): nothing judged, and a note says why.
            assert_eq!(row.get("met"), &Json::Null, "{measure}: skipped, but met or missed");
            assert_eq!(row.get("ratio"), &Json::Null, "{measure}: skipped, but a ratio");
            assert!(!row.get("judged").flag(), "{measure}: skipped, but judged");
            assert!(row.get("note").text().starts_with("skipped: "), "{measure}: no value");
            continue;
        };
        assert!(value.is_finite() && value >= 0.0, "{measure}: value {value}");
        let unit = row.get("unit").text();
        let units = ["ns", "samples", "bytes", "outputs", "count"];
        assert!(units.contains(&unit), "{measure}: unit {unit}");
        let (baseline, ratio) = (row.get("baseline").number(), row.get("ratio").number());
        match (baseline, ratio) {
            (Some(b), Some(r)) => assert!((r - value / b).abs() <= 1e-9 * r.abs().max(1.0)),
            (Some(b), None) => assert_eq!(b, 0.0, "{measure}: a baseline but no ratio"),
            (None, None) => {}
            other => panic!("{measure}: baseline and ratio disagree: {other:?}"),
        }
        let is_judged = row.get("judged").flag();
        match (row.get("target"), row.get("met")) {
            (Json::Null, Json::Null) => assert!(!is_judged, "{measure}: judged without a target"),
            (target @ Json::Object(_), Json::Bool(met)) => {
                assert!(!target.get("text").text().is_empty(), "{measure}");
                assert!(!target.get("set_for").text().is_empty(), "{measure}");
                let max_value = target.get("max_value").number();
                let max_ratio = target.get("max_ratio").number();
                assert!(max_value.is_some() || max_ratio.is_some(), "{measure}: an empty target");
                let expected = max_value.is_none_or(|m| value <= m)
                    && max_ratio.is_none_or(|m| ratio.is_some_and(|r| r <= m));
                assert_eq!(*met, expected, "{measure}: met disagrees with its numbers");
                if is_judged {
                    judged += 1;
                    missed += usize::from(!met);
                } else {
                    assert!(!row.get("note").text().is_empty(), "{measure}: not judged, no note");
                }
            }
            other => panic!("{measure}: target and met do not match: {other:?}"),
        }
    }
    assert_eq!(report.get("judged").number(), Some(judged as f64), "judged");
    assert_eq!(report.get("missed").number(), Some(missed as f64), "missed");
    assert_eq!(report.get("passed").flag(), missed == 0, "passed");
    rows
}

/// The row whose measure starts with `start`.
pub fn row<'a>(rows: &'a [Json], start: &str) -> &'a Json {
    rows.iter()
        .find(|r| r.get("measure").text().starts_with(start))
        .unwrap_or_else(|| panic!("no row {start:?}"))
}
