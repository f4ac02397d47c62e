"""The offline bundle: everything a spec's NVIDIA stack needs, gathered for an air-gapped site.

``gpuforge bundle SPEC -o DIR`` fetches, from where the spec can reach them (the spec's
mirror URLs in mirror mode, NVIDIA's public upstream otherwise), what the NVIDIA deploy
installs on the spec's nodes, in the layout ``gpuforge.render.nvidia_sources`` reads in offline mode:

* ``artifacts/<file name>``: release files (enroot packages, the pyxis tarball, dcgm-exporter);
* ``apt/<repo>/`` for ``nvidia-cuda`` and ``nvidia-container``: a flat repository holding
  exactly the packages the nodes need at their pinned versions plus their dependency closure
  within that repository, and a regenerated ``Packages`` index (``Filename: ./<deb>``, Size,
  SHA256). Dependencies the repository does not carry come from the node's OS archive and
  are listed as ``external`` in the manifest. Recommends are not followed: the deploys
  install with ``--no-install-recommends``;
* ``manifest.json``: every file with its sha256, size and source, what could not be
  fetched (``missing``) and what the bundle cannot carry (``unsupported``: the rpm
  repositories of RHEL nodes, which need ``repodata/`` generated with createrepo; one
  built by hand under ``rpm/<repo>/`` is recorded, as is a release file placed by hand
  where nothing publishes it, e.g. dcgm-exporter outside a mirror).

Signatures (``gpuforge.bundle.trust``): an index is used only once the repository's
``InRelease`` verifies with its key (from upstream: NVIDIA's key with its cited fingerprint)
and lists the index's SHA256. Each bundled repository gets its own ``InRelease``, signed with
a key made for the build whose secret half is never stored; nodes trust its public half,
``apt/gpuforge-bundle.gpg``, through ``signed-by`` (no ``[trusted=yes]``).

Downloads land in ``DIR/.partial/`` and are renamed into place only once their checksum
matches the repository index (release files: ``KNOWN_SHA256`` when it lists them, else
the checksum is recorded). A re-run keeps every file whose checksum still matches; an
index that cannot be reached leaves that repository as the previous run made it.
``verify_bundle`` re-checks a bundle against its manifest.
"""

from __future__ import annotations
