"""Search engines measured side by side by benchmarks/search_speed.py, one module per engine.

Each module defines a ``Peer`` subclass (see ``common.Peer``); ``PEERS`` maps the name used on the
command line and in the results table to ``module:Class``. Modules import their engine lazily, in the
worker process, so a peer that fails to install or run is reported, never silently dropped.
"""
PEERS = {
    "tokenspace": "benchmarks.peers.tokenspace_peer:TokenspacePeer",
    "scipy": "benchmarks.peers.scipy_peer:ScipyPeer",
    "sparse_dot_topn": "benchmarks.peers.sdtopn_peer:SparseDotTopnPeer",
    "pisa": "benchmarks.peers.pisa_peer:PisaPeer",
    "seismic": "benchmarks.peers.seismic_peer:SeismicPeer",
    "sindi": "benchmarks.peers.sindi_peer:SindiPeer",
    "bmp": "benchmarks.peers.bmp_peer:BmpPeer",
    "kannolo": "benchmarks.peers.kannolo_peer:KannoloPeer",
    "milvus-lite": "benchmarks.peers.milvus_peer:MilvusPeer",
    "faiss-flat-dense": "benchmarks.peers.faiss_peer:FaissPeer",
}
