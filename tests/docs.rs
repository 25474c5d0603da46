//! The docs say what a user needs where the user looks for it: the README's user settings hold
//! no test hook, where a backend is chosen it says which have run on real hardware, the static
//! link goes through pkg-config; docs/BENCHMARKS.md puts today's numbers first and names its
//! history by commits and dates.

fn read(path: &str) -> String {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// The lines of the `## title` section, up to the next `## `.
fn section<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    let heading = format!("## {title}");
    let mut lines = text.lines().skip_while(|l| *l != heading);
    assert!(lines.next().is_some(), "no section {heading:?}");
    lines.take_while(|l| !l.starts_with("## ")).collect()
}

#[test]
fn the_users_environment_table_holds_no_test_hook() {
    let readme = read("README.md");
    let environment = section(&readme, "Environment");
    let rows: Vec<&&str> = environment.iter().filter(|l| l.starts_with("| `")).collect();
    assert!(rows.len() >= 10, "no environment table: {environment:?}");
    for row in rows {
        assert!(!row.contains("JITBRIDGE_DISK_CACHE_FAULT"), "a test hook in the table: {row}");
        assert!(!row.contains("test hook"), "a test hook in the table: {row}");
    }
    // Named where the test hooks are, as what it is.
    let hooks = section(&readme, "Test hooks").join("\n");
    assert!(hooks.contains("`JITBRIDGE_DISK_CACHE_FAULT=enospc`"), "{hooks}");
    assert!(hooks.contains("is no setting for users"), "{hooks}");
}

#[test]
fn where_a_backend_is_chosen_the_readme_says_which_ran_on_real_hardware() {
    let readme = read("README.md");
    let features = section(&readme, "Feature flags");
    let header = features.iter().find(|l| l.starts_with("| feature |")).expect("a feature table");
    assert!(header.contains("run on real hardware"), "{header}");
    let row = |feature: &str| {
        let start = format!("| {feature} |");
        *features.iter().find(|l| l.starts_with(&start)).unwrap_or_else(|| panic!("no {feature}"))
    };
    assert!(row("(none)").contains("yes:"), "{}", row("(none)"));
    assert!(row("`cuda`").contains("yes: an NVIDIA H200"), "{}", row("`cuda`"));
    let rocm = row("`rocm`");
    assert!(
        rocm.contains("no: never run on an AMD GPU") && rocm.contains("no-device path"),
        "{rocm}"
    );
}

#[test]
fn the_static_recipe_asks_pkg_config_for_the_libraries() {
    let readme = read("README.md");
    assert!(readme.contains("$(pkg-config --static --libs jitbridge)"), "no pkg-config --static");
    assert!(!readme.contains("-pthread -ldl -lm"), "the libraries are written out by hand");
    let makefile = read("examples/c/Makefile");
    assert!(
        makefile.contains("$(PKG_CONFIG) --static --libs jitbridge"),
        "the demo's static build"
    );
}

#[test]
fn benchmarks_put_todays_numbers_first_and_name_the_history_by_commits() {
    let text = read("docs/BENCHMARKS.md");
    let headings: Vec<&str> = text.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(headings, ["## Today's numbers", "## History"], "the sections");
    assert!(!text.to_lowercase().contains("session"), "a period of work names a run");
    let today = section(&text, "Today's numbers");
    let tables = today.iter().filter(|l| l.starts_with("### ")).count();
    assert!(tables >= 2, "a table per backend and host: {tables}");
    for part in text.split("\n### ").skip(1) {
        let (title, body) = part.split_once('\n').unwrap();
        let first = body.lines().find(|l| !l.is_empty()).unwrap_or_default();
        let is_commit = |w: &str| {
            let w = w.trim_matches(|c: char| !c.is_ascii_alphanumeric());
            w.len() == 7
                && w.bytes().all(|b| b.is_ascii_hexdigit())
                && w.bytes().any(|b| b.is_ascii_digit())
        };
        let is_date = |w: &str| {
            w.len() >= 10
                && w[..10].bytes().enumerate().all(|(i, b)| match i {
                    4 | 7 => b == b'-',
                    _ => b.is_ascii_digit(),
                })
        };
        let said = |line: &str| {
            (line.split_whitespace().any(is_commit), line.split_whitespace().any(is_date))
        };
        if text.find(&format!("### {title}")) < text.find("## History") {
            // Today's tables: the commit and the date of the run, in the lines under the heading.
            let intro: Vec<&str> = body.lines().take_while(|l| !l.starts_with('|')).collect();
            let (commit, date) = intro.iter().fold((false, false), |(c, d), l| {
                let (lc, ld) = said(l);
                (c || lc, d || ld)
            });
            assert!(commit && date, "today's {title:?} names no commit and date: {first}");
        } else {
            assert_eq!(said(title), (true, true), "history heading {title:?}: a commit and a date");
        }
    }
}
