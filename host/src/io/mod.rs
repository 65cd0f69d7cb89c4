//! Reading and writing the files the command-line tool works with: CSV and NPY matrices, label
//! columns, PNG/JPEG images, and outputs that appear only when a run succeeds.
//!
//! * Inputs: [`read_matrix`] (CSV with header detection, or 2-D NPY of any plain numeric dtype,
//!   memory-mapped),
//!   [`read_labelled`] (a matrix with one label column split off), [`read_labels`] (one column),
//!   [`image::read_image`].
//! * Outputs go through [`Outputs`]: every file is written to a temporary file in its target's
//!   directory and renamed only by [`Outputs::commit`], so a failed run leaves nothing behind.
//!   The format follows the extension: `.npy` is NPY, `.json` JSON (where it makes sense),
//!   anything else CSV.
//!
//! Every error is an [`IoError`] naming the file and, for text, the line and column. Inputs
//! that cannot fit in memory are refused before anything is allocated for them ([`memory`]).

pub mod atomic;
pub mod csv;
pub mod image;
pub mod memory;
pub mod npy;
pub mod npz;

pub use atomic::{AtomicFile, Outputs};

use std::fmt;
use std::ops::Deref;
use std::path::{Path, PathBuf};

/// Result alias of this module.
pub type Result<T, E = IoError> = std::result::Result<T, E>;

/// Whether a failure is the input's fault (bad usage or data) or the environment's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blame {
    /// The file is missing, malformed or of the wrong kind.
    Input,
    /// Writing failed (disk full, permissions, ...).
    Output,
}

/// A file that could not be read or written; `Display` is one sentence naming the file and,
/// for text files, the line and column (both counting from 1).
#[derive(Debug)]
pub struct IoError {
    /// The file.
    pub path: PathBuf,
    /// Line in the file, from 1.
    pub line: Option<u64>,
    /// Column (field) in the line, from 1.
    pub column: Option<usize>,
    /// What is wrong.
    pub message: String,
    /// Whose fault it is.
    pub blame: Blame,
}

impl IoError {
    /// An error about input file `path`.
    pub fn input(path: &Path, message: impl Into<String>) -> Self {
        IoError {
            path: path.to_path_buf(),
            line: None,
            column: None,
            message: message.into(),
            blame: Blame::Input,
        }
    }

    /// An error about output file `path`.
    pub fn output(path: &Path, message: impl Into<String>) -> Self {
        IoError {
            blame: Blame::Output,
            ..IoError::input(path, message)
        }
    }

    /// The same error at `line` (and `column`).
    pub fn at(mut self, line: u64, column: Option<usize>) -> Self {
        self.line = Some(line);
        self.column = column;
        self
    }

    /// Opening or reading `path` failed with `e`.
    pub fn read(path: &Path, e: &std::io::Error) -> Self {
        IoError::input(path, format!("cannot read it: {}", describe_io(e)))
    }

    /// Writing `path` failed with `e`.
    pub fn write(path: &Path, e: &std::io::Error) -> Self {
        IoError::output(path, format!("cannot write it: {}", describe_io(e)))
    }
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, ", line {l}, column {c}")?,
            (Some(l), None) => write!(f, ", line {l}")?,
            _ => {}
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for IoError {}

/// A short description of an OS error without the "(os error N)" suffix.
pub fn describe_io(e: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match e.kind() {
        NotFound => "no such file or directory".into(),
        PermissionDenied => "permission denied".into(),
        IsADirectory => "it is a directory".into(),
        AlreadyExists => "it already exists".into(),
        _ => {
            let s = e.to_string();
            match s.find(" (os error") {
                Some(i) => s[..i].to_string(),
                None => s,
            }
        }
    }
}

/// How an output file is written, chosen by its extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `.npy`
    Npy,
    /// `.json`
    Json,
    /// Anything else: comma-separated text (`.tsv`: tab-separated).
    Csv,
}

impl Format {
    /// The format of `path` by its extension.
    pub fn of(path: &Path) -> Format {
        match extension(path).as_str() {
            "npy" => Format::Npy,
            "json" => Format::Json,
            _ => Format::Csv,
        }
    }
}

/// The lower-case extension of `path` ("" when none).
pub fn extension(path: &Path) -> String {
    path.extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// The delimiter for `path`: `given`, else tab for `.tsv`, else comma.
pub fn delimiter_for(path: &Path, given: Option<u8>) -> u8 {
    given.unwrap_or(if extension(path) == "tsv" {
        b'\t'
    } else {
        b','
    })
}

/// How CSV inputs are read.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadOptions {
    /// Field delimiter; `None`: tab for `.tsv`, else comma.
    pub delimiter: Option<u8>,
    /// Whether the first row is a header; `None`: detected (a first row none of whose numeric
    /// fields parses as a number).
    pub header: Option<bool>,
}

/// The values of a [`Table`]: read into memory, or mapped in place from an NPY file.
#[derive(Clone)]
pub enum Values {
    /// Parsed or converted values.
    Owned(Vec<f32>),
    /// A little-endian `float32` NPY file's values, not copied.
    Mapped(npy::MappedValues),
}

impl Deref for Values {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        match self {
            Values::Owned(v) => v,
            Values::Mapped(m) => m.as_slice(),
        }
    }
}

impl fmt::Debug for Values {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = match self {
            Values::Owned(_) => "owned",
            Values::Mapped(_) => "mapped",
        };
        write!(f, "{} {how} values", self.len())
    }
}

impl PartialEq for Values {
    fn eq(&self, other: &Values) -> bool {
        **self == **other
    }
}

/// A dense row-major `f32` matrix read from a file.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// `rows × cols` values, row-major.
    pub data: Values,
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// Column names, when the file had a header.
    pub header: Option<Vec<String>>,
}

impl Table {
    /// A view for the library (borrowing the values, mapped or not).
    pub fn view(&self) -> crate::MatrixView<'_> {
        crate::MatrixView::new(&self.data, self.rows, self.cols).expect("rows × cols values")
    }
}

/// Which column of a labelled file holds the label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LabelColumn {
    /// The first column.
    First,
    /// The last column.
    #[default]
    Last,
    /// Column `N`, counting from 1.
    Index(usize),
}

impl std::str::FromStr for LabelColumn {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "first" => Ok(LabelColumn::First),
            "last" => Ok(LabelColumn::Last),
            _ => match s.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(LabelColumn::Index(n)),
                _ => Err(format!(
                    "'{s}' is not 'first', 'last' or a column number counting from 1"
                )),
            },
        }
    }
}

impl LabelColumn {
    /// The 0-based index in a row of `cols` fields, or why there is none.
    pub fn resolve(self, cols: usize) -> std::result::Result<usize, String> {
        match self {
            LabelColumn::First => Ok(0),
            LabelColumn::Last => Ok(cols.saturating_sub(1)),
            LabelColumn::Index(n) if n <= cols => Ok(n - 1),
            LabelColumn::Index(n) => Err(format!(
                "the label column is {n} but the rows have only {cols} columns"
            )),
        }
    }
}

/// Features with one label per row, labels kept as text.
#[derive(Clone, Debug, PartialEq)]
pub struct Labelled {
    /// The feature columns.
    pub features: Table,
    /// The label of every row, as written in the file (NPY numbers formatted as integers when
    /// whole).
    pub labels: Vec<String>,
}

/// Reads a 2-D matrix: NPY (any plain numeric dtype, memory-mapped) by the `.npy` extension,
/// else CSV.
pub fn read_matrix(path: &Path, opts: &ReadOptions) -> Result<Table> {
    if extension(path) == "npy" {
        npy::read_matrix(path)
    } else {
        csv::read_matrix(path, opts)
    }
}

/// Reads a matrix whose column `label` holds labels (text in CSV; numbers in NPY).
pub fn read_labelled(path: &Path, opts: &ReadOptions, label: LabelColumn) -> Result<Labelled> {
    if extension(path) == "npy" {
        let t = npy::read_matrix(path)?;
        let col = label.resolve(t.cols).map_err(|m| IoError::input(path, m))?;
        if t.cols < 2 {
            return Err(IoError::input(
                path,
                "a labelled file needs at least two columns (features and a label)",
            ));
        }
        let mut data = Vec::with_capacity(t.rows * (t.cols - 1));
        let mut labels = Vec::with_capacity(t.rows);
        for r in 0..t.rows {
            let row = &t.data[r * t.cols..(r + 1) * t.cols];
            for (c, &v) in row.iter().enumerate() {
                if c == col {
                    labels.push(format_number(f64::from(v)));
                } else {
                    data.push(v);
                }
            }
        }
        let header = t.header.map(|mut h| {
            h.remove(col);
            h
        });
        Ok(Labelled {
            features: Table {
                data: Values::Owned(data),
                rows: t.rows,
                cols: t.cols - 1,
                header,
            },
            labels,
        })
    } else {
        csv::read_labelled(path, opts, label)
    }
}

/// Reads a file of one label per row (CSV/text with an optional header, or a 1-D or `n × 1`
/// NPY array of numbers).
pub fn read_labels(path: &Path, opts: &ReadOptions) -> Result<Vec<String>> {
    if extension(path) == "npy" {
        npy::read_labels(path)
    } else {
        csv::read_labels(path, opts)
    }
}

/// Reads one number per row (CSV/text with an optional header, or a 1-D or `n × 1` NPY array of
/// numbers), e.g. sample weights; a value that is not a number is an error naming it.
pub fn read_numbers(path: &Path, opts: &ReadOptions) -> Result<Vec<f32>> {
    read_labels(path, opts)?
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.trim().parse::<f32>().map_err(|_| {
                IoError::input(
                    path,
                    format!("value {} is '{v}', which is not a number", i + 1),
                )
            })
        })
        .collect()
}

/// `v` as text: integers without a fraction, others as Rust's shortest round-trip form.
pub fn format_number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}
