//! `jitbridge bench --json` is JSON a program can read: numbers as numbers, and a met flag on
//! every row that has a target, consistent with the row's own numbers.

use std::process::Command;

#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Number(f64),
    Text(String),
    List(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn get(&self, key: &str) -> &Json {
        match self {
            Json::Object(fields) => {
                fields.iter().find(|(k, _)| k == key).map(|(_, v)| v).unwrap_or_else(|| {
                    panic!("no field {key:?} in {self:?}");
                })
            }
            other => panic!("{other:?} is not an object (looking for {key:?})"),
        }
    }
    fn number(&self) -> Option<f64> {
        match self {
            Json::Number(n) => Some(*n),
            Json::Null => None,
            other => panic!("{other:?} is neither a number nor null"),
        }
    }
    fn text(&self) -> &str {
        match self {
            Json::Text(s) => s,
            other => panic!("{other:?} is not a string"),
        }
    }
}

/// A small JSON reader: enough for the bench's output, strict about what it reads.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn parse(text: &str) -> Result<Json, String> {
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

#[test]
fn the_reader_reads_what_it_should_and_refuses_the_rest() {
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

#[test]
fn bench_json_parses_and_every_targeted_row_says_met_or_missed() {
    let output = Command::new(env!("CARGO_BIN_EXE_jitbridge"))
        .args(["bench", "--json", "--quick", "--device", "cpu"])
        .env("JITBRIDGE_DISK_CACHE", "0")
        .output()
        .expect("run jitbridge bench");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "bench failed: {}", String::from_utf8_lossy(&output.stderr));
    let report = Reader::parse(&stdout).unwrap_or_else(|e| panic!("{e} in {stdout}"));
    assert_eq!(report.get("backend").text(), "cpu");
    assert_eq!(report.get("quick"), &Json::Bool(true));
    assert!(report.get("cores").number().is_some_and(|n| n >= 1.0));
    let Json::List(rows) = report.get("rows") else { panic!("rows is not a list") };
    let mut targeted = 0;
    for row in rows {
        let measure = format!("{} / {}", row.get("section").text(), row.get("measure").text());
        let value = row.get("value").number().unwrap_or_else(|| panic!("{measure}: no value"));
        assert!(value.is_finite() && value >= 0.0, "{measure}: value {value}");
        // Latencies in ns; histogram rows count samples per latency bucket.
        let unit = row.get("unit").text();
        assert!(unit == "ns" || unit == "samples", "{measure}: unit {unit}");
        let baseline = row.get("baseline").number();
        let ratio = row.get("ratio").number();
        match (baseline, ratio) {
            (Some(b), Some(r)) => assert!((r - value / b).abs() <= 1e-9 * r.abs().max(1.0)),
            (None, None) => {}
            other => panic!("{measure}: baseline and ratio disagree: {other:?}"),
        }
        match (row.get("target"), row.get("met")) {
            (Json::Null, Json::Null) => {}
            (target @ Json::Object(_), Json::Bool(met)) => {
                targeted += 1;
                assert!(!target.get("text").text().is_empty(), "{measure}");
                assert!(target.get("hardware").text().contains("H200"), "{measure}");
                let max_value = target.get("max_value").number();
                let max_ratio = target.get("max_ratio").number();
                assert!(max_value.is_some() || max_ratio.is_some(), "{measure}: an empty target");
                let expected = max_value.is_none_or(|m| value <= m)
                    && max_ratio.is_none_or(|m| ratio.is_some_and(|r| r <= m));
                assert_eq!(*met, expected, "{measure}: met disagrees with its numbers");
            }
            other => panic!("{measure}: target and met do not match: {other:?}"),
        }
    }
    assert_eq!(
        targeted, 7,
        "the seven targets (section 6, the soak's decode p99, included) each have a row"
    );
}
