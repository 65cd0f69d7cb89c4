//! CSV inputs: numeric matrices with an optional header, labelled rows, label columns. Every
//! error names the file, line and column.

use super::{
    IoError, LabelColumn, Labelled, ReadOptions, Result, Table, Values, delimiter_for, memory,
};
use std::io::Read;
use std::path::Path;

fn open(path: &Path, opts: &ReadOptions) -> Result<::csv::Reader<std::fs::File>> {
    let file = std::fs::File::open(path).map_err(|e| IoError::read(path, &e))?;
    let meta = file.metadata().map_err(|e| IoError::read(path, &e))?;
    if meta.is_dir() {
        return Err(IoError::input(path, "cannot read it: it is a directory"));
    }
    if meta.len() == 0 {
        return Err(IoError::input(path, "the file is empty"));
    }
    check_memory(path, meta.len(), memory::available())?;
    Ok(reader(file, path, opts))
}

/// Refuses a text file of `len` bytes when its values, about as many bytes as the text, would
/// not fit in `available` bytes of memory.
fn check_memory(path: &Path, len: u64, available: Option<u64>) -> Result<()> {
    match available {
        Some(free) if len > free => Err(IoError::input(
            path,
            format!(
                "the file is {} and its values would need about as much memory, but only {} is \
                 available",
                memory::bytes(len),
                memory::bytes(free)
            ),
        )),
        _ => Ok(()),
    }
}

fn reader<R: Read>(r: R, path: &Path, opts: &ReadOptions) -> ::csv::Reader<R> {
    // The csv crate skips a UTF-8 byte-order mark and reads \n, \r\n and \r line ends.
    ::csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(::csv::Trim::All)
        .delimiter(delimiter_for(path, opts.delimiter))
        .from_reader(r)
}

fn csv_error(path: &Path, e: &::csv::Error) -> IoError {
    let line = e.position().map(|p| p.line());
    let message = match e.kind() {
        ::csv::ErrorKind::Utf8 { err, .. } => {
            format!("field {} is not valid UTF-8 text", err.field() + 1)
        }
        ::csv::ErrorKind::Io(io) => format!("cannot read it: {}", super::describe_io(io)),
        _ => e.to_string(),
    };
    let err = IoError::input(path, message);
    match line {
        Some(l) => err.at(l, None),
        None => err,
    }
}

/// Spellings of missing values (compared ignoring case) that spreadsheets, pandas and R write
/// (NaN and infinities in every case already parse as numbers): they are numbers that are not
/// finite, not text.
const MISSING: [&str; 14] = [
    "na", "n/a", "#n/a", "#n/a n/a", "#na", "<na>", "null", "none", "-nan", "+nan", "1.#ind",
    "-1.#ind", "1.#qnan", "-1.#qnan",
];

fn is_missing(s: &str) -> bool {
    MISSING.iter().any(|m| m.eq_ignore_ascii_case(s))
}

fn parse_number(s: &str, delimiter: u8) -> std::result::Result<f32, String> {
    if s.is_empty() {
        return Err("the field is empty, expected a number".into());
    }
    let grouped;
    let text = if delimiter == b',' && grouped_by(s, ',') {
        grouped = s.replace(',', "");
        grouped.as_str()
    } else {
        s
    };
    match text.parse::<f32>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(v) if v.is_nan() => Err(format!("'{s}' is not a finite number (NaN)")),
        Ok(_) if s.to_ascii_lowercase().contains("inf") => {
            Err(format!("'{s}' is not a finite number (infinite)"))
        }
        Ok(_) => Err(format!(
            "'{s}' is not a finite 32-bit number (beyond ±3.4e38)"
        )),
        Err(_) if is_missing(s) => Err(format!(
            "'{s}' is a missing value, not a finite number (drop or fill missing values first)"
        )),
        Err(_) if grouped_by(s, ' ') => Err(format!(
            "'{s}' is not a number: spaces are not read as thousands separators (write \
             {} or use --delimiter space if they separate fields)",
            s.replace(' ', "")
        )),
        Err(_) => {
            let hint = [';', '\t', ' ', '|', ',']
                .into_iter()
                .find(|&c| s.contains(c) && s.split(c).all(|p| p.trim().parse::<f64>().is_ok()));
            match hint {
                Some(c) => Err(format!(
                    "'{s}' is not a number (is the delimiter {}? use --delimiter)",
                    match c {
                        '\t' => "a tab".to_string(),
                        ' ' => "a space".to_string(),
                        c => format!("'{c}'"),
                    }
                )),
                None => Err(format!("'{s}' is not a number")),
            }
        }
    }
}

/// Whether `s` is a number whose integer digits are grouped by three with `sep` ("1,234.5",
/// "-12,345,678", "1 234"). Commas are read as thousands separators only in comma-separated
/// files, where such a field must have been quoted: with other delimiters a comma may be a
/// decimal comma ("1,234" is 1.234 in a ';'-separated file). Spaces never are: "1 234" is an
/// error that says so.
fn grouped_by(s: &str, sep: char) -> bool {
    let unsigned = s.strip_prefix(['-', '+']).unwrap_or(s);
    let int_end = unsigned
        .find(|c: char| c != sep && !c.is_ascii_digit())
        .unwrap_or(unsigned.len());
    let (int, rest) = unsigned.split_at(int_end);
    let mut groups = int.split(sep);
    let lead = groups.next().unwrap_or("");
    int.contains(sep)
        && (1..=3).contains(&lead.len())
        && groups.all(|g| g.len() == 3 && g.bytes().all(|b| b.is_ascii_digit()))
        && lead.bytes().all(|b| b.is_ascii_digit())
        && !rest.contains(sep)
        && format!("0{rest}").parse::<f64>().is_ok()
}

/// Whether `s` reads as a number, finite or not (header detection).
fn is_number(s: &str) -> bool {
    s.parse::<f64>().is_ok() || is_missing(s) || grouped_by(s, ',')
}

/// Reads a numeric CSV matrix.
pub fn read_matrix(path: &Path, opts: &ReadOptions) -> Result<Table> {
    read_impl(open(path, opts)?, path, opts, None).map(|l| l.features)
}

/// Reads a numeric CSV matrix from `text`; `path` names it in errors (and picks the default
/// delimiter by its extension).
pub fn table_from_reader(text: impl Read, path: &Path, opts: &ReadOptions) -> Result<Table> {
    read_impl(reader(text, path, opts), path, opts, None).map(|l| l.features)
}

/// Reads a CSV whose column `label` holds labels (any text) and the rest numbers.
pub fn read_labelled(path: &Path, opts: &ReadOptions, label: LabelColumn) -> Result<Labelled> {
    read_impl(open(path, opts)?, path, opts, Some(label))
}

fn read_impl<R: Read>(
    mut rdr: ::csv::Reader<R>,
    path: &Path,
    opts: &ReadOptions,
    label: Option<LabelColumn>,
) -> Result<Labelled> {
    let delimiter = delimiter_for(path, opts.delimiter);
    let mut record = ::csv::StringRecord::new();
    let mut cols = 0usize;
    let mut first_line = 0u64;
    let mut label_idx: Option<usize> = None;
    let mut header: Option<Vec<String>> = None;
    let mut data = Vec::new();
    let mut labels = Vec::new();
    let mut rows = 0usize;
    let mut first = true;
    loop {
        match rdr.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Err(csv_error(path, &e)),
        }
        let line = record.position().map_or(0, |p| p.line());
        if first {
            first = false;
            cols = record.len();
            first_line = line;
            if let Some(l) = label {
                let idx = l
                    .resolve(cols)
                    .map_err(|m| IoError::input(path, m).at(line, None))?;
                if cols < 2 {
                    return Err(IoError::input(
                        path,
                        "a labelled file needs at least two columns (features and a label)",
                    )
                    .at(line, None));
                }
                label_idx = Some(idx);
            }
            let is_header = opts.header.unwrap_or_else(|| {
                record
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| Some(i) != label_idx)
                    .all(|(_, f)| !f.is_empty() && !is_number(f))
            });
            if is_header {
                // A byte-order mark after leading blanks is not skipped by the csv crate: it is
                // not part of a column's name.
                let mut names: Vec<String> = record
                    .iter()
                    .map(|f| f.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}'))
                    .map(str::to_string)
                    .collect();
                if let Some(i) = label_idx {
                    names.remove(i);
                }
                header = Some(names);
                continue;
            }
        }
        if record.len() != cols {
            return Err(IoError::input(
                path,
                format!(
                    "the row has {} field{}, expected {cols} as on line {first_line}",
                    record.len(),
                    if record.len() == 1 { "" } else { "s" }
                ),
            )
            .at(line, Some(record.len().min(cols) + 1)));
        }
        for (i, field) in record.iter().enumerate() {
            if Some(i) == label_idx {
                if field.is_empty() {
                    return Err(IoError::input(path, "the label is empty").at(line, Some(i + 1)));
                }
                labels.push(field.to_string());
            } else {
                let v = parse_number(field, delimiter)
                    .map_err(|m| IoError::input(path, m).at(line, Some(i + 1)))?;
                data.push(v);
            }
        }
        rows += 1;
    }
    if rows == 0 {
        return Err(IoError::input(
            path,
            if header.is_some() {
                "the file has a header but no data rows"
            } else {
                "the file is empty"
            },
        ));
    }
    let feature_cols = cols - usize::from(label_idx.is_some());
    Ok(Labelled {
        features: Table {
            data: Values::Owned(data),
            rows,
            cols: feature_cols,
            header,
        },
        labels,
    })
}

/// Reads one label per row. A first row is dropped as a header when `opts.header` says so, or
/// (detected) when it is not a number and every other row is.
pub fn read_labels(path: &Path, opts: &ReadOptions) -> Result<Vec<String>> {
    let mut rdr = open(path, opts)?;
    let mut record = ::csv::StringRecord::new();
    let mut labels = Vec::new();
    loop {
        match rdr.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Err(csv_error(path, &e)),
        }
        let line = record.position().map_or(0, |p| p.line());
        if record.len() != 1 {
            return Err(IoError::input(
                path,
                format!(
                    "a label file has one column, this row has {} fields",
                    record.len()
                ),
            )
            .at(line, Some(2)));
        }
        if record[0].is_empty() {
            return Err(IoError::input(path, "the label is empty").at(line, Some(1)));
        }
        labels.push(record[0].to_string());
    }
    let drop_first = opts.header.unwrap_or_else(|| {
        labels.len() > 1 && !is_number(&labels[0]) && labels[1..].iter().all(|l| is_number(l))
    });
    if drop_first && !labels.is_empty() {
        labels.remove(0);
    }
    if labels.is_empty() {
        return Err(IoError::input(path, "the file has no labels"));
    }
    Ok(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new file ending in `name` holding `text`, removed when dropped; every call gets its own
    /// path, as tests run in parallel threads of one process.
    fn file(name: &str, text: &str) -> tempfile::TempPath {
        let f = tempfile::Builder::new().suffix(name).tempfile().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f.into_temp_path()
    }

    #[test]
    fn reads_with_and_without_header() {
        let o = ReadOptions::default();
        let t = read_matrix(&file("a.csv", "x,y\n1,2\n3,4.5\n"), &o).unwrap();
        assert_eq!((t.rows, t.cols), (2, 2));
        assert_eq!(*t.data, [1.0, 2.0, 3.0, 4.5]);
        assert_eq!(t.header, Some(vec!["x".into(), "y".into()]));
        let t = read_matrix(&file("b.csv", "1, 2\n3 ,4\n"), &o).unwrap();
        assert_eq!(t.header, None);
        assert_eq!(*t.data, [1.0, 2.0, 3.0, 4.0]);
        let t = read_matrix(&file("c.tsv", "1\t2\n3\t4\n"), &o).unwrap();
        assert_eq!(t.cols, 2);
    }

    #[test]
    fn errors_name_line_and_column() {
        let o = ReadOptions::default();
        let e = read_matrix(&file("r.csv", "1,2\n3,4\n5\n"), &o).unwrap_err();
        assert_eq!((e.line, e.column), (Some(3), Some(2)));
        assert!(e.to_string().contains("r.csv, line 3"), "{e}");
        let e = read_matrix(&file("n.csv", "a,b\n1,2\n3,x\n"), &o).unwrap_err();
        assert_eq!((e.line, e.column), (Some(3), Some(2)));
        assert!(e.to_string().contains("'x' is not a number"), "{e}");
        let e = read_matrix(&file("e.csv", ""), &o).unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        let e = read_matrix(&file("h.csv", "a,b\n"), &o).unwrap_err();
        assert!(e.to_string().contains("no data rows"), "{e}");
        let e = read_matrix(&file("s.csv", "1;2\n3;4\n"), &o).unwrap_err();
        assert!(e.to_string().contains("--delimiter"), "{e}");
        let e = read_matrix(&file("f.csv", "1,nan\n"), &o).unwrap_err();
        assert!(e.to_string().contains("finite"), "{e}");
    }

    #[test]
    fn labelled_rows_keep_text_labels() {
        let o = ReadOptions::default();
        let l = read_labelled(
            &file("l.csv", "f1,f2,kind\n1,2,normal.\n3,4,smurf.\n"),
            &o,
            LabelColumn::Last,
        )
        .unwrap();
        assert_eq!(l.labels, vec!["normal.", "smurf."]);
        assert_eq!(*l.features.data, [1.0, 2.0, 3.0, 4.0]);
        let l = read_labelled(&file("m.csv", "a,1,2\nb,3,4\n"), &o, LabelColumn::First).unwrap();
        assert_eq!(l.labels, vec!["a", "b"]);
        assert_eq!(l.features.header, None);
        let l = read_labelled(&file("k.csv", "1,7,2\n3,8,4\n"), &o, LabelColumn::Index(2)).unwrap();
        assert_eq!(l.labels, vec!["7", "8"]);
        assert_eq!(*l.features.data, [1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn label_files_drop_a_header() {
        let o = ReadOptions::default();
        assert_eq!(
            read_labels(&file("t.csv", "label\n1\n2\n"), &o).unwrap(),
            vec!["1", "2"]
        );
        assert_eq!(
            read_labels(&file("u.csv", "normal.\nsmurf.\n"), &o).unwrap(),
            vec!["normal.", "smurf."]
        );
    }

    #[test]
    fn quoted_and_grouped_numbers_bom_and_crlf() {
        let o = ReadOptions::default();
        let t = read_matrix(
            &file(
                "q.csv",
                "\u{feff}\"x\",\"y\"\r\n\"1.5\",\"1,234.5\"\r\n-2,\"-12,345,678\"\r\n",
            ),
            &o,
        )
        .unwrap();
        assert_eq!(t.header, Some(vec!["x".into(), "y".into()]));
        assert_eq!(*t.data, [1.5, 1234.5, -2.0, -12345678.0]);
        // A mark after a blank (found by fuzzing) is dropped too, so the header round-trips.
        let t = read_matrix(&file("b.csv", "\t\u{feff}a,b\n1,2\n"), &o).unwrap();
        assert_eq!(t.header, Some(vec!["a".into(), "b".into()]));
        // Grouping must be by three, and a comma is never a thousands separator with ';'.
        let e = read_matrix(&file("g.csv", "\"1,23\",1\n"), &o).unwrap_err();
        assert!(e.to_string().contains("'1,23' is not a number"), "{e}");
        let semi = ReadOptions {
            delimiter: Some(b';'),
            header: None,
        };
        let e = read_matrix(&file("d.csv", "1,234;5\n"), &semi).unwrap_err();
        assert_eq!((e.line, e.column), (Some(1), Some(1)));
        let e = read_matrix(&file("sp.csv", "1 234,5\n"), &o).unwrap_err();
        assert!(
            e.to_string()
                .contains("spaces are not read as thousands separators (write 1234"),
            "{e}"
        );
    }

    #[test]
    fn nan_inf_and_missing_spellings_are_non_finite_not_text() {
        let o = ReadOptions::default();
        for (field, needle) in [
            ("NaN", "(NaN)"),
            ("nan", "(NaN)"),
            ("-nan", "(NaN)"),
            ("inf", "(infinite)"),
            ("-Infinity", "(infinite)"),
            ("+INF", "(infinite)"),
            ("1e39", "beyond ±3.4e38"),
            ("NA", "missing value"),
            ("N/A", "missing value"),
            ("#N/A", "missing value"),
            ("null", "missing value"),
            ("None", "missing value"),
        ] {
            let e =
                read_matrix(&file("nf.csv", &format!("a,b\n1,2\n3,{field}\n")), &o).unwrap_err();
            assert_eq!((e.line, e.column), (Some(3), Some(2)), "{field}");
            let text = e.to_string();
            assert!(
                text.contains("not a finite") && text.contains(needle),
                "{field}: {text}"
            );
            assert!(!text.contains("is not a number"), "{text}");
        }
        // A first row of missing values is data (refused), not a header.
        let e = read_matrix(&file("na.csv", "NA,NA\n1,2\n"), &o).unwrap_err();
        assert_eq!(e.line, Some(1));
    }

    #[test]
    fn text_larger_than_memory_is_refused_naming_both_sizes() {
        let e = check_memory(Path::new("big.csv"), 3 << 30, Some(1 << 30)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "big.csv: the file is 3.0 GiB and its values would need about as much memory, but \
             only 1.0 GiB is available"
        );
        assert!(check_memory(Path::new("big.csv"), 1 << 30, Some(1 << 30)).is_ok());
    }
}
