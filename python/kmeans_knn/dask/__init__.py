"""k-means and exact kNN over Dask arrays, exact across workers (needs dask and distributed).

Partitions stay on the workers that hold them, on each worker's GPU when it has one, else its
CPU; the results equal those of the single-process estimators on the concatenated rows, bit for
bit, however the rows are partitioned::

    from distributed import Client
    from kmeans_knn.dask import KMeans, NearestNeighbors, local_gpu_cluster

    client = Client(local_gpu_cluster())        # one worker per GPU; or any Dask cluster
    km = KMeans(n_clusters=1024, init="k-means||", random_state=0).fit(X)  # X: dask.array
    labels = km.labels_                          # a Dask array, partitioned as X
"""

from .cluster import KMeans
from .gpu import local_gpu_cluster, visible_gpus
from .neighbors import NearestNeighbors

__all__ = ["KMeans", "NearestNeighbors", "local_gpu_cluster", "visible_gpus"]
