//! Outputs that appear whole or not at all: written to a temporary file beside the target and
//! renamed into place once every output of a run is complete.

use super::npy::{Element, NpyWriter};
use super::{Format, IoError, Result, describe_io};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A file being written under a temporary name in its target's directory; removed on drop
/// unless [`AtomicFile::commit`] renamed it to the target.
pub struct AtomicFile {
    target: PathBuf,
    temp: PathBuf,
    file: Option<BufWriter<File>>,
}

impl AtomicFile {
    /// Starts writing `target` (through a temporary file in the same directory).
    pub fn create(target: &Path) -> Result<AtomicFile> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let name = target
            .file_name()
            .ok_or_else(|| IoError::output(target, "the output path has no file name"))?
            .to_string_lossy()
            .into_owned();
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !dir.is_dir() {
            return Err(IoError::output(
                target,
                format!(
                    "cannot write it: the directory {} does not exist",
                    dir.display()
                ),
            ));
        }
        if target.is_dir() {
            return Err(IoError::output(
                target,
                "cannot write it: it is a directory",
            ));
        }
        let temp = dir.join(format!(
            ".{name}.{}.{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let file = File::create_new(&temp).map_err(|e| IoError::write(target, &e))?;
        Ok(AtomicFile {
            target: target.to_path_buf(),
            temp,
            file: Some(BufWriter::with_capacity(1 << 20, file)),
        })
    }

    /// The path the file will have once committed.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The open writer.
    pub fn writer(&mut self) -> &mut BufWriter<File> {
        self.file.as_mut().expect("the file is open until commit")
    }

    /// Maps an error of writing this file.
    pub fn err(&self, e: &std::io::Error) -> IoError {
        IoError::write(&self.target, e)
    }

    /// Flushes the data to disk without renaming.
    pub fn finish(&mut self) -> Result<()> {
        let target = self.target.clone();
        let w = self.writer();
        w.flush().map_err(|e| IoError::write(&target, &e))?;
        w.get_ref()
            .sync_data()
            .map_err(|e| IoError::write(&target, &e))
    }

    /// Flushes and renames the file to its target.
    pub fn commit(mut self) -> Result<()> {
        self.finish()?;
        drop(self.file.take());
        std::fs::rename(&self.temp, &self.target).map_err(|e| {
            IoError::output(
                &self.target,
                format!(
                    "cannot move the finished file into place: {}",
                    describe_io(&e)
                ),
            )
        })?;
        self.temp = PathBuf::new();
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writer().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.writer().flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        drop(self.file.take());
        if !self.temp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// The outputs of one run: all written first, then renamed into place together.
#[derive(Default)]
pub struct Outputs {
    files: Vec<AtomicFile>,
}

impl Outputs {
    /// No outputs yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a finished file.
    pub fn push(&mut self, mut file: AtomicFile) -> Result<()> {
        file.finish()?;
        self.files.push(file);
        Ok(())
    }

    /// Writes a `rows × cols` matrix to `path` (NPY or CSV by extension; JSON as an array of
    /// rows).
    pub fn matrix<T: Element>(
        &mut self,
        path: &Path,
        rows: usize,
        cols: usize,
        data: &[T],
        header: Option<&[String]>,
    ) -> Result<()> {
        assert_eq!(data.len(), rows * cols);
        let mut w = MatrixWriter::create(path, rows, cols, T::DESCR, header)?;
        if cols > 0 {
            for row in data.chunks(cols) {
                w.write_rows(row)?;
            }
        }
        self.push(w.finish()?)
    }

    /// Writes one value per row to `path` (NPY 1-D or CSV with one column).
    pub fn vector<T: Element>(&mut self, path: &Path, data: &[T]) -> Result<()> {
        match Format::of(path) {
            Format::Npy => {
                let mut f = AtomicFile::create(path)?;
                let mut w = NpyWriter::new(f.writer(), &[data.len()], T::DESCR)
                    .map_err(|e| IoError::write(path, &e))?;
                w.write_values(data).map_err(|e| IoError::write(path, &e))?;
                self.push(f)
            }
            _ => self.matrix(path, data.len(), 1, data, None),
        }
    }

    /// Writes lines of text (CSV rows already formatted) to `path`.
    pub fn text(&mut self, path: &Path, text: &str) -> Result<()> {
        let mut f = AtomicFile::create(path)?;
        f.write_all(text.as_bytes()).map_err(|e| f.err(&e))?;
        self.push(f)
    }

    /// Writes `value` as pretty JSON to `path`.
    pub fn json<T: serde::Serialize>(&mut self, path: &Path, value: &T) -> Result<()> {
        let mut text = serde_json::to_string_pretty(value)
            .map_err(|e| IoError::output(path, format!("cannot encode JSON: {e}")))?;
        text.push('\n');
        self.text(path, &text)
    }

    /// Encodes `img` to `path` (PNG or JPEG by extension).
    pub fn image(&mut self, path: &Path, img: &::image::RgbImage) -> Result<()> {
        let format = super::image::output_format(path)?;
        let mut f = AtomicFile::create(path)?;
        img.write_to(f.writer(), format)
            .map_err(|e| IoError::output(path, format!("cannot encode the image: {e}")))?;
        self.push(f)
    }

    /// The paths that will be written, in order.
    pub fn paths(&self) -> Vec<&Path> {
        self.files.iter().map(|f| f.target()).collect()
    }

    /// Renames every file into place.
    pub fn commit(self) -> Result<()> {
        for f in self.files {
            f.commit()?;
        }
        Ok(())
    }
}

/// Writes a matrix row block by row block (NPY with its shape known up front, or CSV).
pub struct MatrixWriter {
    file: AtomicFile,
    format: Format,
    cols: usize,
    rows_left: usize,
    delimiter: u8,
    json_first: bool,
    line: String,
}

impl MatrixWriter {
    /// Starts `path` for `rows × cols` values of NPY type `descr` (`<f4`, `<u4`, ...).
    pub fn create(
        path: &Path,
        rows: usize,
        cols: usize,
        descr: &str,
        header: Option<&[String]>,
    ) -> Result<MatrixWriter> {
        let mut file = AtomicFile::create(path)?;
        let format = Format::of(path);
        let delimiter = super::delimiter_for(path, None);
        match format {
            Format::Npy => {
                NpyWriter::write_header(file.writer(), &[rows, cols], descr)
                    .map_err(|e| IoError::write(path, &e))?;
            }
            Format::Json => file.write_all(b"[").map_err(|e| IoError::write(path, &e))?,
            Format::Csv => {
                if let Some(h) = header {
                    // Quoted where a name holds the delimiter, a quote or a line break, so the
                    // header reads back as the same columns.
                    let mut w = ::csv::WriterBuilder::new()
                        .delimiter(delimiter)
                        .terminator(::csv::Terminator::Any(b'\n'))
                        .from_writer(file.writer());
                    w.write_record(h)
                        .and_then(|()| w.flush().map_err(::csv::Error::from))
                        .map_err(|e| IoError::output(path, format!("cannot write it: {e}")))?;
                }
            }
        }
        Ok(MatrixWriter {
            file,
            format,
            cols,
            rows_left: rows,
            delimiter,
            json_first: true,
            line: String::new(),
        })
    }

    /// Appends whole rows (`values.len()` a multiple of `cols`).
    pub fn write_rows<T: Element>(&mut self, values: &[T]) -> Result<()> {
        debug_assert!(self.cols > 0 && values.len().is_multiple_of(self.cols));
        let rows = values.len() / self.cols;
        assert!(rows <= self.rows_left, "more rows than announced");
        self.rows_left -= rows;
        let w = self.file.writer();
        let res = match self.format {
            Format::Npy => T::write_le(values, w),
            Format::Csv | Format::Json => {
                use std::fmt::Write as _;
                let mut r = Ok(());
                for row in values.chunks(self.cols) {
                    self.line.clear();
                    if self.format == Format::Json {
                        self.line
                            .push_str(if self.json_first { "\n  [" } else { ",\n  [" });
                        self.json_first = false;
                    }
                    for (i, v) in row.iter().enumerate() {
                        if i > 0 {
                            if self.format == Format::Json {
                                self.line.push_str(", ");
                            } else {
                                self.line.push(self.delimiter as char);
                            }
                        }
                        let _ = write!(self.line, "{}", v.text());
                    }
                    if self.format == Format::Json {
                        self.line.push(']');
                    } else {
                        self.line.push('\n');
                    }
                    r = w.write_all(self.line.as_bytes());
                    if r.is_err() {
                        break;
                    }
                }
                r
            }
        };
        res.map_err(|e| self.file.err(&e))
    }

    /// Completes the file (still under its temporary name).
    pub fn finish(mut self) -> Result<AtomicFile> {
        assert_eq!(self.rows_left, 0, "fewer rows than announced");
        if self.format == Format::Json {
            self.file
                .write_all(b"\n]\n")
                .map_err(|e| self.file.err(&e))?;
        }
        self.file.finish()?;
        Ok(self.file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kmk-atomic-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn nothing_appears_until_commit_and_nothing_stays_on_drop() {
        let dir = scratch("drop");
        let mut outputs = Outputs::new();
        outputs.text(&dir.join("a.csv"), "1\n").unwrap();
        outputs
            .matrix(&dir.join("b.npy"), 2, 2, &[1f32, 2.0, 3.0, 4.0], None)
            .unwrap();
        assert!(!dir.join("a.csv").exists() && !dir.join("b.npy").exists());
        assert_eq!(names(&dir).len(), 2, "two temporary files");
        drop(outputs);
        assert!(names(&dir).is_empty(), "{:?}", names(&dir));

        let mut outputs = Outputs::new();
        outputs.text(&dir.join("a.csv"), "1\n").unwrap();
        outputs.vector(&dir.join("c.npy"), &[7u32, 8]).unwrap();
        outputs.commit().unwrap();
        assert_eq!(names(&dir), vec!["a.csv", "c.npy"]);
        assert_eq!(std::fs::read_to_string(dir.join("a.csv")).unwrap(), "1\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn formats_follow_the_extension() {
        let dir = scratch("fmt");
        let mut outputs = Outputs::new();
        let header = ["x".to_string(), "y".to_string()];
        let m = [1.5f32, -2.0, 0.25, 4.0];
        outputs
            .matrix(&dir.join("m.csv"), 2, 2, &m, Some(&header))
            .unwrap();
        outputs.matrix(&dir.join("m.tsv"), 2, 2, &m, None).unwrap();
        outputs.matrix(&dir.join("m.json"), 2, 2, &m, None).unwrap();
        outputs.commit().unwrap();
        let csv = std::fs::read_to_string(dir.join("m.csv")).unwrap();
        assert_eq!(csv, "x,y\n1.5,-2\n0.25,4\n");
        let tsv = std::fs::read_to_string(dir.join("m.tsv")).unwrap();
        assert_eq!(tsv, "1.5\t-2\n0.25\t4\n");
        let json: Vec<Vec<f32>> =
            serde_json::from_str(&std::fs::read_to_string(dir.join("m.json")).unwrap()).unwrap();
        assert_eq!(json, vec![vec![1.5, -2.0], vec![0.25, 4.0]]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn header_names_holding_the_delimiter_read_back_as_one_column_each() {
        // Found by fuzz/csv: the tab-separated header "\0,2" was written to CSV unquoted and
        // read back as two columns.
        let dir = scratch("hdr");
        let header = ["\0,2".to_string(), "say \"hi\"".to_string()];
        let mut outputs = Outputs::new();
        outputs
            .matrix(&dir.join("h.csv"), 1, 2, &[3f32, 4.0], Some(&header))
            .unwrap();
        outputs.commit().unwrap();
        let opts = crate::io::ReadOptions {
            delimiter: None,
            header: Some(true),
        };
        let t = crate::io::csv::read_matrix(&dir.join("h.csv"), &opts).unwrap();
        assert_eq!(t.header.as_deref(), Some(&header[..]));
        assert_eq!(*t.data, [3.0, 4.0]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_directory_is_named() {
        let e = AtomicFile::create(Path::new("/no/such/dir/x.csv"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("/no/such/dir") && e.contains("does not exist"),
            "{e}"
        );
    }
}
