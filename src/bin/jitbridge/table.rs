//! Tables whose columns are as wide as their widest cell: a long label moves its column, never
//! the cells after it.

/// How a column's cells line up.
#[derive(Clone, Copy, PartialEq)]
pub enum Align {
    Left,
    Right,
}

/// The lines of a table: a header, then one line per row; two spaces between columns, no
/// trailing spaces. Widths count characters, not bytes.
pub fn lines(columns: &[(&str, Align)], rows: &[Vec<String>]) -> Vec<String> {
    let mut widths: Vec<usize> = columns.iter().map(|(name, _)| name.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .zip(columns)
            .map(|((cell, width), (_, align))| match align {
                Align::Left => format!("{cell:<width$}"),
                Align::Right => format!("{cell:>width$}"),
            })
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    let mut out = vec![line(columns.iter().map(|(name, _)| *name).collect())];
    out.extend(rows.iter().map(|row| line(row.iter().map(String::as_str).collect())));
    out
}

#[cfg(test)]
mod tests {
    use super::{Align, lines};

    #[test]
    fn columns_follow_their_widest_cell() {
        let rows = vec![
            vec!["a".to_string(), "1.0 ns".to_string(), "met".to_string()],
            vec!["a much longer label".to_string(), "12.50 ms".to_string(), String::new()],
        ];
        let out = lines(
            &[("measure", Align::Left), ("value", Align::Right), ("met", Align::Left)],
            &rows,
        );
        assert_eq!(
            out,
            [
                "measure                 value  met",
                "a                      1.0 ns  met",
                "a much longer label  12.50 ms",
            ]
        );
    }
}
