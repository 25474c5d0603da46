//! Which of the soak's other workers run beside the decode loop: `jitbridge soak --workers`.

/// Which of the other workers run beside the decode loop (`--workers`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Workers {
    /// The embedding first-launch worker.
    pub embed: bool,
    /// The rerank first-launch worker.
    pub rerank: bool,
    /// The two threads sharing one stream.
    pub shared: bool,
    /// The batch worker allocating arrays of varying sizes.
    pub batch: bool,
    /// The forked child that compiles and exits.
    pub fork: bool,
}

impl Workers {
    /// The names `--workers` takes, in the order reports list them.
    pub const NAMES: [&'static str; 5] = ["embed", "rerank", "shared", "batch", "fork"];
    pub const ALL: Workers =
        Workers { embed: true, rerank: true, shared: true, batch: true, fork: true };
    pub const NONE: Workers =
        Workers { embed: false, rerank: false, shared: false, batch: false, fork: false };

    fn flag(&mut self, name: &str) -> Option<&mut bool> {
        match name {
            "embed" => Some(&mut self.embed),
            "rerank" => Some(&mut self.rerank),
            "shared" => Some(&mut self.shared),
            "batch" => Some(&mut self.batch),
            "fork" => Some(&mut self.fork),
            _ => None,
        }
    }

    /// `all`, `none`, or a comma list of distinct names from NAMES; the message says what is
    /// wrong.
    pub fn parse(text: &str) -> Result<Workers, String> {
        let names = Workers::NAMES.join(", ");
        match text {
            "all" => return Ok(Workers::ALL),
            "none" => return Ok(Workers::NONE),
            _ => {}
        }
        let mut workers = Workers::NONE;
        for name in text.split(',') {
            if name.is_empty() {
                return Err(format!(
                    "--workers: an empty name in '{text}' (a comma list of {names})"
                ));
            }
            if name == "all" || name == "none" {
                return Err(format!("--workers: '{name}' stands alone, not in a list ('{text}')"));
            }
            let Some(flag) = workers.flag(name) else {
                return Err(format!(
                    "--workers: no worker '{name}' in '{text}' (a comma list of {names}; or all, \
                     or none)"
                ));
            };
            if *flag {
                return Err(format!("--workers: '{name}' is listed twice in '{text}'"));
            }
            *flag = true;
        }
        Ok(workers)
    }

    /// The names of the workers that run, in NAMES order.
    pub fn names(&self) -> Vec<&'static str> {
        let mut copy = *self;
        Workers::NAMES.into_iter().filter(|n| copy.flag(n).is_some_and(|f| *f)).collect()
    }

    /// Worker threads this selection starts (the shared stream's two, the fork's one).
    pub fn threads(&self) -> usize {
        usize::from(self.embed)
            + usize::from(self.rerank)
            + 2 * usize::from(self.shared)
            + usize::from(self.batch)
            + usize::from(self.fork)
    }

    /// "all", "none", or the list.
    pub fn describe(&self) -> String {
        match *self {
            Workers::ALL => "all".into(),
            Workers::NONE => "none".into(),
            _ => self.names().join(","),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Workers;

    #[test]
    fn workers_parse_names_lists_all_and_none() {
        assert_eq!(Workers::parse("all"), Ok(Workers::ALL));
        assert_eq!(Workers::parse("none"), Ok(Workers::NONE));
        let one = Workers::parse("shared").unwrap();
        assert_eq!(one, Workers { shared: true, ..Workers::NONE });
        assert_eq!(one.threads(), 2, "the shared stream has two threads");
        let some = Workers::parse("fork,embed").unwrap();
        assert_eq!(some.names(), ["embed", "fork"]);
        assert_eq!(some.describe(), "embed,fork");
        assert_eq!(Workers::parse(&Workers::NAMES.join(",")), Ok(Workers::ALL));
        assert_eq!(Workers::ALL.threads(), 6);
        assert_eq!(Workers::NONE.threads(), 0);
    }

    #[test]
    fn workers_parse_refuses_what_it_does_not_know() {
        for (text, says) in [
            ("embedding", "no worker 'embedding'"),
            ("embed,Batch", "no worker 'Batch'"),
            ("", "an empty name"),
            ("embed,", "an empty name"),
            ("embed,,batch", "an empty name"),
            (" embed", "no worker ' embed'"),
            ("embed,embed", "'embed' is listed twice"),
            ("none,embed", "'none' stands alone"),
            ("embed,all", "'all' stands alone"),
        ] {
            let message = Workers::parse(text).expect_err(text);
            assert!(message.contains(says), "{text:?}: {message:?} does not say {says:?}");
            assert!(message.starts_with("--workers: "), "{message}");
        }
    }
}
