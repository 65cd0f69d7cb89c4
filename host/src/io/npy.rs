//! NPY files (NumPy's `.npy`, format versions 1–3): 2-D `f32`/`f64` matrices in C order, label
//! vectors of integers or floats, and a streaming writer.

use super::{IoError, Result, Table, format_number};
use std::io::{self, Read, Write};
use std::path::Path;

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

/// Parses the header of an NPY stream.
pub fn read_header(r: &mut impl Read) -> std::result::Result<Header, String> {
    let mut pre = [0u8; 8];
    r.read_exact(&mut pre)
        .map_err(|_| "it is not an NPY file (too short)".to_string())?;
    if &pre[..6] != MAGIC {
        return Err("it is not an NPY file (the magic string \\x93NUMPY is missing)".into());
    }
    let len = match pre[6] {
        1 => {
            let mut b = [0u8; 2];
            r.read_exact(&mut b)
                .map_err(|_| "its NPY header is truncated".to_string())?;
            u16::from_le_bytes(b) as usize
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            r.read_exact(&mut b)
                .map_err(|_| "its NPY header is truncated".to_string())?;
            u32::from_le_bytes(b) as usize
        }
        v => return Err(format!("NPY format version {v} is not supported")),
    };
    if len > 1 << 20 {
        return Err("its NPY header is implausibly long".into());
    }
    let mut text = vec![0u8; len];
    r.read_exact(&mut text)
        .map_err(|_| "its NPY header is truncated".to_string())?;
    let text = String::from_utf8_lossy(&text);
    parse_header(&text)
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

fn dtype_name(descr: &str) -> String {
    let kind = descr.trim_start_matches(['<', '>', '|', '=']);
    let name = match kind {
        "f2" => "float16",
        "f4" => "float32",
        "f8" => "float64",
        "i1" => "int8",
        "i2" => "int16",
        "i4" => "int32",
        "i8" => "int64",
        "u1" => "uint8",
        "u2" => "uint16",
        "u4" => "uint32",
        "u8" => "uint64",
        "b1" => "bool",
        _ if kind.starts_with('U') || kind.starts_with('S') => "string",
        _ if kind.starts_with('O') => "object",
        _ => kind,
    };
    format!("{name} ('{descr}')")
}

/// An NPY array as read: its header and the raw bytes of its values.
struct Raw {
    header: Header,
    bytes: Vec<u8>,
    offset: usize,
    kind: String,
    big: bool,
}

impl Raw {
    /// The values in file order, converted with `f`.
    fn values<T>(&self, f: impl Fn(f64) -> T) -> Vec<T> {
        let size: usize = self.kind[1..].parse().expect("size digit");
        let count = self.header.shape.iter().product::<usize>();
        let body = &self.bytes[self.offset..self.offset + count * size];
        match (self.kind.as_str(), self.big) {
            // The common case without a detour through f64.
            ("f4", false) => body
                .chunks_exact(4)
                .map(|c| {
                    f(f64::from(f32::from_le_bytes(
                        c.try_into().expect("4 bytes"),
                    )))
                })
                .collect(),
            _ => body
                .chunks_exact(size)
                .map(|c| f(decode(&self.kind, self.big, c)))
                .collect(),
        }
    }
}

/// Reads a whole NPY file; `allowed` lists the accepted type kinds (`f4`, `i8`, ...).
fn read_array(path: &Path, allowed: &[&str], wanted: &str) -> Result<Raw> {
    let bytes = std::fs::read(path).map_err(|e| IoError::read(path, &e))?;
    if bytes.is_empty() {
        return Err(IoError::input(path, "the file is empty"));
    }
    let mut cursor = io::Cursor::new(&bytes[..]);
    let header = read_header(&mut cursor).map_err(|m| IoError::input(path, m))?;
    let offset = cursor.position() as usize;
    let kind = header
        .descr
        .trim_start_matches(['<', '>', '|', '='])
        .to_string();
    let big = header.descr.starts_with('>');
    if !allowed.contains(&kind.as_str()) {
        return Err(IoError::input(
            path,
            format!(
                "the NPY dtype is {}, expected {wanted}",
                dtype_name(&header.descr)
            ),
        ));
    }
    if header.fortran_order && header.shape.iter().filter(|&&s| s > 1).count() > 1 {
        return Err(IoError::input(
            path,
            "the NPY array is in Fortran (column-major) order; save it with \
             numpy.ascontiguousarray first",
        ));
    }
    let size: usize = kind[1..].parse().expect("size digit");
    let count = header
        .shape
        .iter()
        .try_fold(1usize, |a, &s| a.checked_mul(s))
        .ok_or_else(|| IoError::input(path, "the NPY shape is too large"))?;
    let body = bytes.len() - offset;
    if body < count * size {
        return Err(IoError::input(
            path,
            format!(
                "the NPY data is truncated: shape {:?} needs {} bytes, the file holds {}",
                header.shape,
                count * size,
                body
            ),
        ));
    }
    Ok(Raw {
        header,
        bytes,
        offset,
        kind,
        big,
    })
}

fn decode(kind: &str, big: bool, c: &[u8]) -> f64 {
    macro_rules! num {
        ($t:ty) => {{
            let b = c.try_into().expect("element size");
            (if big {
                <$t>::from_be_bytes(b)
            } else {
                <$t>::from_le_bytes(b)
            }) as f64
        }};
    }
    match kind {
        "f4" => num!(f32),
        "f8" => num!(f64),
        "i1" => num!(i8),
        "i2" => num!(i16),
        "i4" => num!(i32),
        "i8" => num!(i64),
        "u1" => num!(u8),
        "u2" => num!(u16),
        "u4" => num!(u32),
        "u8" => num!(u64),
        _ => unreachable!("checked kind"),
    }
}

/// Reads a 2-D `f32` or `f64` NPY matrix in C order; every value must be finite.
pub fn read_matrix(path: &Path) -> Result<Table> {
    let a = read_array(path, &["f4", "f8"], "float32 or float64")?;
    let shape = a.header.shape.clone();
    if shape.len() != 2 {
        return Err(IoError::input(
            path,
            format!(
                "the NPY array has {} dimension{} (shape {:?}), expected 2 (rows × columns)",
                shape.len(),
                if shape.len() == 1 { "" } else { "s" },
                shape
            ),
        ));
    }
    let (rows, cols) = (shape[0], shape[1]);
    if rows == 0 {
        return Err(IoError::input(path, "the NPY array has no rows"));
    }
    if cols == 0 {
        return Err(IoError::input(path, "the NPY array has no columns"));
    }
    let data: Vec<f32> = a.values(|v| v as f32);
    if let Some(i) = data.iter().position(|v| !v.is_finite()) {
        return Err(IoError::input(
            path,
            format!(
                "the value at row {}, column {} (counting from 1) is {}, not a finite 32-bit \
                 number",
                i / cols + 1,
                i % cols + 1,
                data[i]
            ),
        ));
    }
    Ok(Table {
        data,
        rows,
        cols,
        header: None,
    })
}

/// Reads labels from a 1-D or `n × 1` NPY array of integers or floats.
pub fn read_labels(path: &Path) -> Result<Vec<String>> {
    let kinds = ["f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"];
    let a = read_array(path, &kinds, "an integer or float type")?;
    let shape = &a.header.shape;
    if !(shape.len() == 1 || (shape.len() == 2 && shape[1] == 1)) {
        return Err(IoError::input(
            path,
            format!("a label file needs shape (n,) or (n, 1), this NPY array has {shape:?}"),
        ));
    }
    Ok(a.values(format_number))
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

    fn npy(descr: &str, shape: &[usize], body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        NpyWriter::write_header(&mut v, shape, descr).unwrap();
        assert_eq!(v.len() % 64, 0);
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn header_round_trips() {
        let v = npy("<f4", &[3, 2], &[]);
        let h = read_header(&mut &v[..]).unwrap();
        assert_eq!(h.descr, "<f4");
        assert!(!h.fortran_order);
        assert_eq!(h.shape, vec![3, 2]);
        let v = npy("<u4", &[5], &[]);
        assert_eq!(read_header(&mut &v[..]).unwrap().shape, vec![5]);
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
    fn reads_matrices_and_rejects_bad_ones() {
        let dir = std::env::temp_dir().join(format!("kmk-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let body: Vec<u8> = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let p = dir.join("m.npy");
        std::fs::write(&p, npy("<f8", &[2, 3], &body)).unwrap();
        let t = read_matrix(&p).unwrap();
        assert_eq!((t.rows, t.cols), (2, 3));
        assert_eq!(t.data, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);

        std::fs::write(&p, npy("<f8", &[6], &body)).unwrap();
        let e = read_matrix(&p).unwrap_err().to_string();
        assert!(e.contains("1 dimension") && e.contains("m.npy"), "{e}");

        std::fs::write(&p, npy("<i4", &[2, 3], &body[..24])).unwrap();
        let e = read_matrix(&p).unwrap_err().to_string();
        assert!(e.contains("int32"), "{e}");

        std::fs::write(&p, npy("<f8", &[3, 3], &body)).unwrap();
        let e = read_matrix(&p).unwrap_err().to_string();
        assert!(e.contains("truncated"), "{e}");

        std::fs::write(&p, b"hello").unwrap();
        let e = read_matrix(&p).unwrap_err().to_string();
        assert!(e.contains("not an NPY file"), "{e}");

        let labels: Vec<u8> = [3i64, 1, 2].iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&p, npy("<i8", &[3], &labels)).unwrap();
        assert_eq!(read_labels(&p).unwrap(), vec!["3", "1", "2"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
