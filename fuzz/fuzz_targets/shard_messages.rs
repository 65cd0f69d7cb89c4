//! The sharded fit's wire messages (what `kmeans_knn.dask`'s client and workers exchange): any
//! bytes are a typed error or a message, never a panic nor an allocation sized from a message's
//! unchecked claims, and a message the codec accepts encodes back to the same bytes.
#![no_main]

use kmeans_knn::kmeans::shard::{Reply, Request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(reply) = Reply::from_bytes(data) {
        let bytes = reply.to_bytes();
        assert_eq!(Reply::from_bytes(&bytes).unwrap().to_bytes(), bytes);
    }
    if let Ok(request) = Request::from_bytes(data) {
        let bytes = request.to_bytes();
        assert_eq!(Request::from_bytes(&bytes).unwrap().to_bytes(), bytes);
        // The name the workers log a request by reads the same bytes.
        assert!(Request::name_of(data).is_some());
    }
});
