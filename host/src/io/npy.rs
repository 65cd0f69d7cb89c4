//! NPY files (NumPy's `.npy`, format versions 1–3): 2-D matrices of any plain numeric dtype
//! (float16/32/64, signed and unsigned integers of 8–64 bits, either byte order, C or Fortran
//! order) read as row-major `f32`, label vectors, and a streaming writer.
//!
//! Files are memory-mapped. A little-endian `float32` matrix in C order is handed to the
//! library in place ([`MappedValues`], no copy); every other layout is converted into one
//! `f32` buffer straight from the map, so a file never sits in memory twice.

use super::{IoError, Result, Table, Values, format_number, memory};
use memmap2::Mmap;
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

const MAGIC: &[u8] = b"\x93NUMPY";
/// A value type that can be written to NPY and CSV.
pub trait Element: Copy {
    /// NPY type descriptor, e.g. `<f4`.
    const DESCR: &'static str;
    /// Writes `values` little-endian.
    fn write_le(values: &[Self], w: &mut impl Write) -> io::Result<()>;
    /// The value as CSV text.
    fn text(&self) -> impl std::fmt::Display;
}

macro_rules! element {
    ($t:ty, $descr:literal) => {
        impl Element for $t {
            const DESCR: &'static str = $descr;
            fn write_le(values: &[Self], w: &mut impl Write) -> io::Result<()> {
                let mut buf = Vec::with_capacity(values.len() * size_of::<$t>());
                for v in values {
                    buf.extend_from_slice(&v.to_le_bytes());
                }
                w.write_all(&buf)
            }
            fn text(&self) -> impl std::fmt::Display {
                *self
            }
        }
    };
}
element!(f32, "<f4");
element!(f64, "<f8");
element!(u32, "<u4");
element!(i64, "<i8");

/// The parsed header of an NPY file.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// Type descriptor, e.g. `<f4`.
    pub descr: String,
    /// Whether the data is in Fortran (column-major) order.
    pub fortran_order: bool,
    /// The shape.
    pub shape: Vec<usize>,
}

/// Parses the header at the start of an NPY file; returns it with the offset of the data.
pub fn split_header(bytes: &[u8]) -> std::result::Result<(Header, usize), String> {
    if bytes.len() < 8 {
        return Err("it is not an NPY file (too short)".into());
    }
    if &bytes[..6] != MAGIC {
        return Err("it is not an NPY file (the magic string \\x93NUMPY is missing)".into());
    }
    let truncated = || "its NPY header is truncated".to_string();
    let (len, start) = match bytes[6] {
        1 => {
            let b = bytes.get(8..10).ok_or_else(truncated)?;
            (usize::from(u16::from_le_bytes([b[0], b[1]])), 10usize)
        }
        2 | 3 => {
            let b = bytes.get(8..12).ok_or_else(truncated)?;
            (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize, 12)
        }
        v => return Err(format!("NPY format version {v} is not supported")),
    };
    // The claimed length is checked against the file before any of it is read.
    let end = start
        .checked_add(len)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(truncated)?;
    let text = String::from_utf8_lossy(&bytes[start..end]);
    Ok((parse_header(&text)?, end))
}

fn value_after<'a>(text: &'a str, key: &str) -> std::result::Result<&'a str, String> {
    let at = text
        .find(&format!("'{key}'"))
        .or_else(|| text.find(&format!("\"{key}\"")))
        .ok_or_else(|| format!("its NPY header has no '{key}'"))?;
    let rest = &text[at + key.len() + 2..];
    let colon = rest
        .find(':')
        .ok_or_else(|| format!("its NPY header is malformed near '{key}'"))?;
    Ok(rest[colon + 1..].trim_start())
}

fn parse_header(text: &str) -> std::result::Result<Header, String> {
    let descr = value_after(text, "descr")?;
    let quote = descr.chars().next().unwrap_or(' ');
    if quote != '\'' && quote != '"' {
        return Err(
            "its dtype is a structured type; only plain numeric arrays are supported".into(),
        );
    }
    let end = descr[1..]
        .find(quote)
        .ok_or("its NPY header is malformed near 'descr'")?;
    let descr = descr[1..1 + end].to_string();
    let fortran = value_after(text, "fortran_order")?;
    let fortran_order = if fortran.starts_with("True") {
        true
    } else if fortran.starts_with("False") {
        false
    } else {
        return Err("its NPY header is malformed near 'fortran_order'".into());
    };
    let shape = value_after(text, "shape")?;
    let close = shape
        .find(')')
        .filter(|_| shape.starts_with('('))
        .ok_or("its NPY header is malformed near 'shape'")?;
    let shape = shape[1..close]
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse::<usize>())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|_| "its NPY header has a malformed shape".to_string())?;
    Ok(Header {
        descr,
        fortran_order,
        shape,
    })
}

/// The number kinds NPY files hold that convert to `f32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Float,
    Int,
    Uint,
}

/// A plain numeric dtype: kind, bytes per value and byte order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Dtype {
    kind: Kind,
    size: usize,
    big_endian: bool,
}

impl Dtype {
    /// The dtype of descriptor `descr`, or why it is not read (with how to convert it).
    fn parse(descr: &str) -> std::result::Result<Dtype, String> {
        let (big_endian, code) = match descr.as_bytes().first() {
            Some(b'>') => (true, &descr[1..]),
            // '=' (native) is little-endian on every platform NumPy writes files from.
            Some(b'<' | b'|' | b'=') => (false, &descr[1..]),
            _ => (false, descr),
        };
        let (kind, size) = match code {
            "f2" => (Kind::Float, 2),
            "f4" => (Kind::Float, 4),
            "f8" => (Kind::Float, 8),
            "i1" => (Kind::Int, 1),
            "i2" => (Kind::Int, 2),
            "i4" => (Kind::Int, 4),
            "i8" => (Kind::Int, 8),
            "u1" => (Kind::Uint, 1),
            "u2" => (Kind::Uint, 2),
            "u4" => (Kind::Uint, 4),
            "u8" => (Kind::Uint, 8),
            "b1" | "?" => {
                return Err(format!(
                    "the NPY dtype is bool ('{descr}'), not numbers; save X.astype(numpy.float32) \
                     if true/false should count as 1/0"
                ));
            }
            c if c.starts_with('c') => {
                return Err(format!(
                    "the NPY dtype is complex ('{descr}'); save the part to cluster as real \
                     numbers, e.g. X.real.astype(numpy.float32) or numpy.abs(X)"
                ));
            }
            c if c.starts_with('O') => {
                return Err(
                    "the NPY array holds Python objects (dtype object), which are read only \
                     through pickle; save a numeric array, e.g. numpy.asarray(X, dtype=numpy.float32)"
                        .into(),
                );
            }
            c if c.starts_with('U') || c.starts_with('S') => {
                return Err(format!(
                    "the NPY array holds text ('{descr}'); convert it to numbers first, e.g. \
                     X.astype(numpy.float32)"
                ));
            }
            _ => {
                return Err(format!(
                    "the NPY dtype '{descr}' is not a plain number type (float16/32/64, int or \
                     uint of 8 to 64 bits); convert it with X.astype(numpy.float32)"
                ));
            }
        };
        Ok(Dtype {
            kind,
            size,
            big_endian,
        })
    }

    /// The value in `c` (`size` bytes) as `f32`, rounded once to nearest as NumPy's
    /// `astype(numpy.float32)` does (float16 converts exactly).
    fn to_f32(self, c: &[u8]) -> f32 {
        macro_rules! num {
            ($t:ty) => {{
                let b = c.try_into().expect("element size");
                (if self.big_endian {
                    <$t>::from_be_bytes(b)
                } else {
                    <$t>::from_le_bytes(b)
                }) as f32
            }};
        }
        match (self.kind, self.size) {
            (Kind::Float, 2) => {
                let b = c.try_into().expect("element size");
                let bits = if self.big_endian {
                    u16::from_be_bytes(b)
                } else {
                    u16::from_le_bytes(b)
                };
                half::f16::from_bits(bits).to_f32()
            }
            (Kind::Float, 4) => num!(f32),
            (Kind::Float, _) => num!(f64),
            (Kind::Int, 1) => num!(i8),
            (Kind::Int, 2) => num!(i16),
            (Kind::Int, 4) => num!(i32),
            (Kind::Int, _) => num!(i64),
            (Kind::Uint, 1) => num!(u8),
            (Kind::Uint, 2) => num!(u16),
            (Kind::Uint, 4) => num!(u32),
            (Kind::Uint, _) => num!(u64),
        }
    }

    /// The value in `c` as label text: integers exactly, floats as [`format_number`].
    fn label(self, c: &[u8]) -> String {
        macro_rules! int {
            ($t:ty) => {{
                let b = c.try_into().expect("element size");
                (if self.big_endian {
                    <$t>::from_be_bytes(b)
                } else {
                    <$t>::from_le_bytes(b)
                })
                .to_string()
            }};
        }
        match (self.kind, self.size) {
            (Kind::Float, 8) => {
                let b = c.try_into().expect("element size");
                format_number(if self.big_endian {
                    f64::from_be_bytes(b)
                } else {
                    f64::from_le_bytes(b)
                })
            }
            (Kind::Float, _) => format_number(f64::from(self.to_f32(c))),
            (Kind::Int, 1) => int!(i8),
            (Kind::Int, 2) => int!(i16),
            (Kind::Int, 4) => int!(i32),
            (Kind::Int, _) => int!(i64),
            (Kind::Uint, 1) => int!(u8),
            (Kind::Uint, 2) => int!(u16),
            (Kind::Uint, 4) => int!(u32),
            (Kind::Uint, _) => int!(u64),
        }
    }
}

/// Where an NPY array's values lie in its file, every length checked against the file.
struct Layout {
    dtype: Dtype,
    fortran_order: bool,
    shape: Vec<usize>,
    /// Offset of the first value.
    offset: usize,
    /// Number of values.
    count: usize,
}

impl Layout {
    fn of(bytes: &[u8], path: &Path) -> Result<Layout> {
        let (header, offset) = split_header(bytes).map_err(|m| IoError::input(path, m))?;
        let dtype = Dtype::parse(&header.descr).map_err(|m| IoError::input(path, m))?;
        let too_large = || {
            IoError::input(
                path,
                format!("the NPY shape {:?} is too large", header.shape),
            )
        };
        let count = header
            .shape
            .iter()
            .try_fold(1usize, |a, &s| a.checked_mul(s))
            .ok_or_else(too_large)?;
        let needed = count.checked_mul(dtype.size).ok_or_else(too_large)?;
        let held = bytes.len() - offset;
        if held < needed {
            return Err(IoError::input(
                path,
                format!(
                    "the NPY data is truncated: shape {:?} needs {needed} bytes, the file holds \
                     {held}",
                    header.shape
                ),
            ));
        }
        Ok(Layout {
            dtype,
            fortran_order: header.fortran_order,
            shape: header.shape,
            offset,
            count,
        })
    }

    /// The bytes of the values.
    fn body<'b>(&self, bytes: &'b [u8]) -> &'b [u8] {
        &bytes[self.offset..self.offset + self.count * self.dtype.size]
    }

    /// Rows and columns of a matrix, or why the array is not one.
    fn matrix_shape(&self, path: &Path) -> Result<(usize, usize)> {
        let (rows, cols) = match self.shape[..] {
            [rows, cols] => (rows, cols),
            [n] => {
                return Err(IoError::input(
                    path,
                    format!(
                        "the NPY array is 1-D (shape ({n},)), expected 2-D rows × columns; save \
                         X.reshape(-1, 1) if it is one feature of {n} samples, or \
                         X.reshape(1, -1) if it is one sample of {n} features"
                    ),
                ));
            }
            _ => {
                return Err(IoError::input(
                    path,
                    format!(
                        "the NPY array has {} dimensions (shape {:?}), expected 2 (rows × \
                         columns); save X.reshape(len(X), -1) to flatten each sample",
                        self.shape.len(),
                        self.shape
                    ),
                ));
            }
        };
        if rows == 0 {
            return Err(IoError::input(path, "the NPY array has no rows"));
        }
        if cols == 0 {
            return Err(IoError::input(path, "the NPY array has no columns"));
        }
        Ok((rows, cols))
    }

    /// Whether the values can be used in place: little-endian `float32` in row-major order.
    fn is_native_f32(&self) -> bool {
        let row_major = !self.fortran_order || self.shape.iter().filter(|&&s| s > 1).count() <= 1;
        cfg!(target_endian = "little")
            && self.dtype.kind == Kind::Float
            && self.dtype.size == 4
            && !self.dtype.big_endian
            && row_major
    }

    /// The values of a `rows × cols` matrix as row-major `f32` (one buffer, no intermediate).
    fn decode(&self, bytes: &[u8], rows: usize, cols: usize) -> Vec<f32> {
        let body = self.body(bytes);
        let size = self.dtype.size;
        if self.fortran_order {
            // Column-major: value (i, j) is the (j·rows + i)-th.
            (0..self.count)
                .map(|r| {
                    let e = (r % cols) * rows + r / cols;
                    self.dtype.to_f32(&body[e * size..(e + 1) * size])
                })
                .collect()
        } else {
            body.chunks_exact(size)
                .map(|c| self.dtype.to_f32(c))
                .collect()
        }
    }
}

/// The `f32` values of a little-endian, row-major `float32` NPY file, read in place from its
/// memory map (shared by clones).
#[derive(Clone)]
pub struct MappedValues {
    map: Arc<Mmap>,
    offset: usize,
    len: usize,
}

impl MappedValues {
    /// The values, row-major.
    pub fn as_slice(&self) -> &[f32] {
        bytemuck::cast_slice(&self.map[self.offset..self.offset + 4 * self.len])
    }
}

/// Maps `path` for reading.
fn map(path: &Path) -> Result<Mmap> {
    let file = std::fs::File::open(path).map_err(|e| IoError::read(path, &e))?;
    let meta = file.metadata().map_err(|e| IoError::read(path, &e))?;
    if meta.is_dir() {
        return Err(IoError::input(path, "cannot read it: it is a directory"));
    }
    if meta.len() == 0 {
        return Err(IoError::input(path, "the file is empty"));
    }
    // SAFETY: the map is only read. Another process truncating the file while it is mapped
    // would fault (SIGBUS): the price of reading inputs larger than the memory.
    unsafe { Mmap::map(&file) }.map_err(|e| IoError::read(path, &e))
}

/// Reads a 2-D NPY matrix of any plain numeric dtype as row-major `f32`; every value must be
/// finite. A little-endian `float32` matrix in C order stays in its memory map, so it may be
/// larger than the memory: the system reads its pages in as they are used (a pass over the
/// data then reads the file). Any other layout is converted into memory, which must hold it.
pub fn read_matrix(path: &Path) -> Result<Table> {
    read_matrix_within(path, memory::available())
}

/// [`read_matrix`] with `available` bytes of memory for converted values.
fn read_matrix_within(path: &Path, available: Option<u64>) -> Result<Table> {
    let map = map(path)?;
    let layout = Layout::of(&map, path)?;
    let (rows, cols) = layout.matrix_shape(path)?;
    if rows >= u32::MAX as usize {
        // Checked before the values are read: a pass over them would take hours.
        return Err(IoError::input(
            path,
            format!(
                "it has {rows} rows; kmeans-knn numbers rows in 32 bits, so fewer than 2^32 − 1"
            ),
        ));
    }
    // numpy pads headers so the data starts on a 64-byte boundary; a file that does not
    // (another writer) is copied instead of read unaligned.
    let in_place =
        layout.is_native_f32() && bytemuck::try_cast_slice::<u8, f32>(layout.body(&map)).is_ok();
    if !in_place {
        // The map holds the file; only the converted values are allocated.
        return table_from_bytes(&map, path, available);
    }
    let values = MappedValues {
        offset: layout.offset,
        len: layout.count,
        map: Arc::new(map),
    };
    check_finite(path, values.as_slice(), cols)?;
    Ok(Table {
        data: Values::Mapped(values),
        rows,
        cols,
        header: None,
    })
}

/// Reads a 2-D NPY matrix held in `bytes` as row-major `f32` (copied and converted); `path`
/// names it in errors. Fails when the values need more than `available` bytes of memory.
pub fn table_from_bytes(bytes: &[u8], path: &Path, available: Option<u64>) -> Result<Table> {
    let layout = Layout::of(bytes, path)?;
    let (rows, cols) = layout.matrix_shape(path)?;
    memory::check(
        path,
        "its values as 32-bit floats",
        (layout.count as u64).saturating_mul(4),
        available,
    )?;
    let data = layout.decode(bytes, rows, cols);
    check_finite(path, &data, cols)?;
    Ok(Table {
        data: Values::Owned(data),
        rows,
        cols,
        header: None,
    })
}

fn check_finite(path: &Path, data: &[f32], cols: usize) -> Result<()> {
    match data.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(IoError::input(
            path,
            format!(
                "the value at row {}, column {} (counting from 1) is {}, not a finite 32-bit \
                 number",
                i / cols + 1,
                i % cols + 1,
                data[i]
            ),
        )),
        None => Ok(()),
    }
}

/// Reads labels from a 1-D or `n × 1` NPY array of integers or floats.
pub fn read_labels(path: &Path) -> Result<Vec<String>> {
    labels_from_bytes(&map(path)?, path)
}

/// Reads labels from an NPY file held in `bytes`; `path` names it in errors.
pub fn labels_from_bytes(bytes: &[u8], path: &Path) -> Result<Vec<String>> {
    let layout = Layout::of(bytes, path)?;
    let shape = &layout.shape;
    if !(shape.len() == 1 || (shape.len() == 2 && shape[1] == 1)) {
        return Err(IoError::input(
            path,
            format!("a label file needs shape (n,) or (n, 1), this NPY array has {shape:?}"),
        ));
    }
    Ok(layout
        .body(bytes)
        .chunks_exact(layout.dtype.size)
        .map(|c| layout.dtype.label(c))
        .collect())
}

/// Writes an NPY header, then values.
pub struct NpyWriter<'w, W: Write> {
    w: &'w mut W,
}

impl<'w, W: Write> NpyWriter<'w, W> {
    /// Writes the header for `shape` of type `descr` to `w`.
    pub fn new(w: &'w mut W, shape: &[usize], descr: &str) -> io::Result<Self> {
        Self::write_header(w, shape, descr)?;
        Ok(NpyWriter { w })
    }

    /// Writes just the header (format version 1.0, padded to 64 bytes).
    pub fn write_header(w: &mut W, shape: &[usize], descr: &str) -> io::Result<()> {
        let dims = match shape {
            [n] => format!("({n},)"),
            _ => format!(
                "({})",
                shape
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {dims}, }}");
        let unpadded = MAGIC.len() + 2 + 2 + dict.len() + 1;
        dict.push_str(&" ".repeat((64 - unpadded % 64) % 64));
        dict.push('\n');
        w.write_all(MAGIC)?;
        w.write_all(&[1, 0])?;
        w.write_all(&(dict.len() as u16).to_le_bytes())?;
        w.write_all(dict.as_bytes())
    }

    /// Appends values.
    pub fn write_values<T: Element>(&mut self, values: &[T]) -> io::Result<()> {
        T::write_le(values, self.w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn npy(descr: &str, shape: &[usize], body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        NpyWriter::write_header(&mut v, shape, descr).unwrap();
        assert_eq!(v.len() % 64, 0);
        v.extend_from_slice(body);
        v
    }

    /// `header` as an NPY version-1 file with its dictionary unpadded, then `body`.
    fn raw_npy(header: &str, body: &[u8]) -> Vec<u8> {
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(&[1, 0]);
        v.extend_from_slice(&(header.len() as u16).to_le_bytes());
        v.extend_from_slice(header.as_bytes());
        v.extend_from_slice(body);
        v
    }

    fn table(bytes: &[u8]) -> Result<Table> {
        table_from_bytes(bytes, Path::new("m.npy"), None)
    }

    fn scratch(name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("kmk-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn header_round_trips() {
        let v = npy("<f4", &[3, 2], &[]);
        let (h, offset) = split_header(&v).unwrap();
        assert_eq!(h.descr, "<f4");
        assert!(!h.fortran_order);
        assert_eq!(h.shape, vec![3, 2]);
        assert_eq!(offset % 64, 0);
        let v = npy("<u4", &[5], &[]);
        assert_eq!(split_header(&v).unwrap().0.shape, vec![5]);
    }

    #[test]
    fn parses_numpy_written_headers() {
        let h =
            parse_header("{'descr': '<f8', 'fortran_order': False, 'shape': (10, 3), }").unwrap();
        assert_eq!(h.shape, vec![10, 3]);
        let h = parse_header("{'descr': '>i4', 'fortran_order': True, 'shape': (7,), }").unwrap();
        assert_eq!((h.descr.as_str(), h.fortran_order), (">i4", true));
        assert_eq!(h.shape, vec![7]);
        let h = parse_header("{'descr': '<f4', 'fortran_order': False, 'shape': (), }").unwrap();
        assert!(h.shape.is_empty());
    }

    #[test]
    fn a_header_longer_than_the_file_is_truncated_not_allocated() {
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(&[2, 0]);
        v.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(split_header(&v).unwrap_err(), "its NPY header is truncated");
    }

    #[test]
    fn every_integer_and_float_dtype_converts_as_numpy_astype_float32() {
        let cases: Vec<(&str, Vec<u8>, [f32; 2])> = vec![
            (
                "|i1",
                [-128i8, 127].iter().flat_map(|v| v.to_le_bytes()).collect(),
                [-128.0, 127.0],
            ),
            ("|u1", vec![0, 255], [0.0, 255.0]),
            (
                "<i2",
                [-3i16, 300].iter().flat_map(|v| v.to_le_bytes()).collect(),
                [-3.0, 300.0],
            ),
            (
                ">u2",
                [7u16, 65535].iter().flat_map(|v| v.to_be_bytes()).collect(),
                [7.0, 65535.0],
            ),
            (
                ">i4",
                [-5i32, 16777217]
                    .iter()
                    .flat_map(|v| v.to_be_bytes())
                    .collect(),
                [-5.0, 16777216.0],
            ),
            (
                "<u4",
                [1u32, u32::MAX]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
                [1.0, 4294967296.0],
            ),
            // 2^53 + 2^29 + 1 rounds once to 2^53 + 2^30 (through f64 it would tie to 2^53).
            (
                "<i8",
                [-1i64, (1 << 53) + (1 << 29) + 1]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
                [-1.0, 9007200328482816.0],
            ),
            (
                ">u8",
                [2u64, u64::MAX]
                    .iter()
                    .flat_map(|v| v.to_be_bytes())
                    .collect(),
                [2.0, 18446744073709551616.0],
            ),
            (
                "<f2",
                [0x3c00u16, 0xc100]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
                [1.0, -2.5],
            ),
            (
                ">f2",
                [0x0001u16, 0x7bff]
                    .iter()
                    .flat_map(|v| v.to_be_bytes())
                    .collect(),
                [5.960_464_5e-8, 65504.0],
            ),
            (
                ">f4",
                [1.5f32, -0.25]
                    .iter()
                    .flat_map(|v| v.to_be_bytes())
                    .collect(),
                [1.5, -0.25],
            ),
            (
                ">f8",
                [0.1f64, 1e30]
                    .iter()
                    .flat_map(|v| v.to_be_bytes())
                    .collect(),
                [0.1, 1e30],
            ),
        ];
        for (descr, body, want) in cases {
            let t = table(&npy(descr, &[1, 2], &body)).unwrap();
            assert_eq!(*t.data, want, "{descr}");
        }
    }

    #[test]
    fn fortran_order_is_transposed_into_rows() {
        // numpy.asfortranarray([[1, 2, 3], [4, 5, 6]]) stores 1 4 2 5 3 6.
        let body: Vec<u8> = [1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let header = "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }";
        let t = table(&raw_npy(header, &body)).unwrap();
        assert_eq!((t.rows, t.cols), (2, 3));
        assert_eq!(*t.data, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let t = read_matrix(&scratch("fortran.npy", &raw_npy(header, &body))).unwrap();
        assert!(matches!(t.data, Values::Owned(_)));
        assert_eq!(*t.data, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    }

    #[test]
    fn arrays_that_are_not_numeric_matrices_say_how_to_convert() {
        let e = table(&npy("<f8", &[6], &[0; 48])).unwrap_err().to_string();
        assert!(
            e.contains("1-D") && e.contains("X.reshape(-1, 1)") && e.contains("X.reshape(1, -1)"),
            "{e}"
        );
        let e = table(&npy("<f4", &[2, 2, 2], &[0; 32]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("3 dimensions") && e.contains("reshape"), "{e}");
        for (descr, needle) in [
            ("|b1", "bool"),
            ("<c8", "complex"),
            ("|O", "Python objects"),
            ("<U5", "text"),
            ("<M8[ns]", "not a plain number type"),
        ] {
            let e = table(&npy(descr, &[1, 1], &[0; 16]))
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle) && e.contains("m.npy"), "{descr}: {e}");
        }
    }

    #[test]
    fn shapes_beyond_the_file_or_the_address_space_are_refused_before_allocating() {
        let e = table(&npy("<f8", &[3, 3], &[0; 48]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("truncated") && e.contains("needs 72 bytes, the file holds 48"),
            "{e}"
        );
        let huge = raw_npy(
            "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4), }",
            &[],
        );
        assert!(table(&huge).unwrap_err().to_string().contains("too large"));
        // Claims that fit in the file but not in memory name both sizes.
        let e = table_from_bytes(&npy("<f4", &[4, 4], &[0; 64]), Path::new("m.npy"), Some(32))
            .unwrap_err()
            .to_string();
        assert!(e.contains("need 64 bytes but only 32 bytes"), "{e}");
    }

    #[test]
    fn a_file_larger_than_memory_is_mapped_when_native_and_refused_when_converted() {
        // 4 × 4 float32: 64 bytes, read in place with 32 bytes of memory.
        let body: Vec<u8> = (0..16).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let p = scratch("big-native.npy", &npy("<f4", &[4, 4], &body));
        let t = read_matrix_within(&p, Some(32)).unwrap();
        assert!(matches!(t.data, Values::Mapped(_)));
        assert_eq!(t.view().as_slice()[15], 15.0);
        // 4 × 4 uint32 converts to 64 bytes of float32: refused, naming both sizes.
        let body: Vec<u8> = (0..16u32).flat_map(|i| i.to_le_bytes()).collect();
        let q = scratch("big-converted.npy", &npy("<u4", &[4, 4], &body));
        let e = read_matrix_within(&q, Some(32)).unwrap_err().to_string();
        assert!(e.contains("need 64 bytes but only 32 bytes"), "{e}");
        for f in [p, q] {
            std::fs::remove_file(f).unwrap();
        }
    }

    #[test]
    fn aligned_float32_is_mapped_and_misaligned_is_copied() {
        let body: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let t = read_matrix(&scratch("mapped.npy", &npy("<f4", &[2, 2], &body))).unwrap();
        assert!(matches!(t.data, Values::Mapped(_)));
        assert_eq!(*t.data, [1.0, 2.0, 3.0, 4.0]);
        // 10 + 60 header bytes: the data starts at 70, not a multiple of 4.
        let header = format!(
            "{:<59}\n",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }"
        );
        let bytes = raw_npy(&header, &body);
        assert_eq!(split_header(&bytes).unwrap().1 % 4, 2);
        let t = read_matrix(&scratch("odd.npy", &bytes)).unwrap();
        assert!(matches!(t.data, Values::Owned(_)));
        assert_eq!(*t.data, [1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn reads_matrices_and_rejects_bad_ones() {
        let body: Vec<u8> = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let p = scratch("m.npy", &npy("<f8", &[2, 3], &body));
        let t = read_matrix(&p).unwrap();
        assert_eq!((t.rows, t.cols), (2, 3));
        assert_eq!(*t.data, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let e = read_matrix(&scratch("n.npy", b"hello"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an NPY file") && e.contains("n.npy"), "{e}");
        let nan = [f32::NAN.to_le_bytes(), 1f32.to_le_bytes()].concat();
        let e = table(&npy("<f4", &[1, 2], &nan)).unwrap_err().to_string();
        assert!(e.contains("row 1, column 1") && e.contains("NaN"), "{e}");
        let e = table(&npy("<f8", &[1, 1], &1e300f64.to_le_bytes()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a finite 32-bit number"), "{e}");
    }

    #[test]
    fn labels_keep_integers_exact() {
        let labels: Vec<u8> = [3i64, 1, (1 << 60) + 1]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let p = Path::new("l.npy");
        assert_eq!(
            labels_from_bytes(&npy("<i8", &[3], &labels), p).unwrap(),
            vec!["3", "1", "1152921504606846977"]
        );
        let floats: Vec<u8> = [2.0f64, 0.5].iter().flat_map(|v| v.to_be_bytes()).collect();
        assert_eq!(
            labels_from_bytes(&npy(">f8", &[2, 1], &floats), p).unwrap(),
            vec!["2", "0.5"]
        );
        let e = labels_from_bytes(&npy("<i8", &[1, 3], &labels), p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("(n,) or (n, 1)"), "{e}");
    }

    proptest! {
        #[test]
        fn written_matrices_read_back_bit_for_bit(
            rows in 1usize..6,
            cols in 1usize..6,
            seed in proptest::collection::vec(-1e30f32..1e30, 36),
        ) {
            let values = &seed[..rows * cols];
            let mut bytes = Vec::new();
            let mut w = NpyWriter::new(&mut bytes, &[rows, cols], f32::DESCR).unwrap();
            w.write_values(values).unwrap();
            let t = table(&bytes).unwrap();
            prop_assert_eq!((t.rows, t.cols), (rows, cols));
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&t.data), bits(values));
        }
    }
}
