//! Sparse matrices in CSR form as `scipy.sparse.save_npz` writes them (and `load_npz` reads
//! them): a ZIP archive (stored) of NPY arrays `indices`, `indptr`, `format` (a 0-d byte string
//! `csr`), `shape` and `data`.

use super::atomic::{AtomicFile, Outputs};
use super::npy::{Element, NpyWriter};
use super::{IoError, Result};
use std::io::Write;
use std::path::Path;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

/// A `rows × cols` sparse matrix in CSR form: row `r`'s entries are `indices[indptr[r] ..
/// indptr[r + 1]]` (columns) with `data` of the same range.
pub struct Csr<'a> {
    pub rows: usize,
    pub cols: usize,
    pub indptr: &'a [usize],
    pub indices: &'a [u32],
    pub data: &'a [f32],
}

impl Outputs {
    /// Writes `csr` to `path` as an `.npz` that `scipy.sparse.load_npz` reads.
    pub fn csr_npz(&mut self, path: &Path, csr: &Csr<'_>) -> Result<()> {
        assert_eq!(csr.indptr.len(), csr.rows + 1);
        assert_eq!(csr.indices.len(), csr.data.len());
        let mut f = AtomicFile::create(path)?;
        let err = |e: &dyn std::fmt::Display| IoError::output(path, format!("cannot write: {e}"));
        let mut zip = ZipWriter::new(f.writer());
        // Row pointers and column indices as int64: scipy narrows them to its index type.
        let indptr: Vec<i64> = csr.indptr.iter().map(|&p| p as i64).collect();
        let indices: Vec<i64> = csr.indices.iter().map(|&i| i as i64).collect();
        let shape = [csr.rows as i64, csr.cols as i64];
        add(&mut zip, "indices", &[indices.len()], &indices).map_err(|e| err(&e))?;
        add(&mut zip, "indptr", &[indptr.len()], &indptr).map_err(|e| err(&e))?;
        start(&mut zip, "format", 3).map_err(|e| err(&e))?;
        NpyWriter::write_header(&mut zip, &[], "|S3").map_err(|e| err(&e))?;
        zip.write_all(b"csr").map_err(|e| err(&e))?;
        add(&mut zip, "shape", &[2], &shape).map_err(|e| err(&e))?;
        add(&mut zip, "data", &[csr.data.len()], csr.data).map_err(|e| err(&e))?;
        zip.finish().map_err(|e| err(&e))?;
        self.push(f)
    }
}

/// Starts the member `name.npy` of about `bytes` bytes (ZIP64 where it needs it).
fn start<W: Write + std::io::Seek>(
    zip: &mut ZipWriter<W>,
    name: &str,
    bytes: usize,
) -> zip::result::ZipResult<()> {
    let options = SimpleFileOptions::default()
        .compression_method(CompressionMethod::Stored)
        .large_file(bytes as u64 + 128 >= u32::MAX as u64);
    zip.start_file(format!("{name}.npy"), options)
}

/// Adds the member `name.npy` holding `values` of `shape`.
fn add<W: Write + std::io::Seek, T: Element>(
    zip: &mut ZipWriter<W>,
    name: &str,
    shape: &[usize],
    values: &[T],
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    start(zip, name, size_of_val(values))?;
    NpyWriter::new(zip, shape, T::DESCR)?.write_values(values)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn the_archive_holds_scipys_members() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.npz");
        let mut outputs = Outputs::new();
        let csr = Csr {
            rows: 2,
            cols: 3,
            indptr: &[0, 2, 2],
            indices: &[2, 0],
            data: &[0.5, 1.5],
        };
        outputs.csr_npz(&path, &csr).unwrap();
        outputs.commit().unwrap();
        let mut zip = zip::ZipArchive::new(std::fs::File::open(&path).unwrap()).unwrap();
        let mut names: Vec<String> = (0..zip.len())
            .map(|i| zip.by_index(i).unwrap().name().unwrap().to_string())
            .collect();
        names.sort();
        let want = [
            "data.npy",
            "format.npy",
            "indices.npy",
            "indptr.npy",
            "shape.npy",
        ];
        assert_eq!(names, want);
        let mut format = Vec::new();
        (zip.by_name("format.npy").unwrap())
            .read_to_end(&mut format)
            .unwrap();
        assert!(format.ends_with(b"csr"));
        let header = String::from_utf8_lossy(&format[..format.len() - 3]).into_owned();
        assert!(header.contains("'descr': '|S3'") && header.contains("'shape': ()"));
        let mut indptr = Vec::new();
        (zip.by_name("indptr.npy").unwrap())
            .read_to_end(&mut indptr)
            .unwrap();
        let body: Vec<i64> = (indptr[indptr.len() - 24..].chunks(8))
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(body, vec![0, 2, 2]);
    }
}
