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
* ``rpm/<repo>/`` for RHEL nodes (``nvidia-cuda``, ``nvidia-container``, ``docker-ce``,
  ``epel``): the chosen ``.rpm`` files and ``repodata/`` written for them
  (``gpuforge.bundle.rpm_repo``), resolved as dnf would with the nodes' module streams;
* ``manifest.json``: every file with its sha256, size and source, and what could not be
  fetched (``missing``), e.g. a release file nothing publishes (dcgm-exporter outside a
  mirror) unless placed by hand.

Signatures (``gpuforge.bundle.trust``): an index is used only once the repository's
``InRelease`` verifies with its key (from upstream: NVIDIA's key with its cited fingerprint)
and lists the index's SHA256 (rpm: ``repomd.xml.asc``, or each package's own signature).
Each bundled repository gets its own ``InRelease`` (rpm: ``repodata/repomd.xml.asc``),
signed with a key made for the build whose secret half is never stored; nodes trust its
public half, ``apt/gpuforge-bundle.gpg`` through ``signed-by`` (no ``[trusted=yes]``),
``rpm/gpuforge-bundle.asc`` through ``repo_gpgcheck=1``. The same key signs ``manifest.json``
(``manifest.json.asc``), and ``gpuforge bundle`` prints its fingerprint for the operator to pin
(``sources.bundle_fingerprint``, ``--verify DIR --fingerprint FPR``): trust is anchored outside the
bundle, so a bundle folder anyone can write cannot re-sign itself. A re-run keeps the key only when
it is the pinned one and nothing it signed changed; otherwise a new key signs everything.

Downloads land in ``DIR/.partial/`` and are renamed into place only once their checksum
matches the repository index (release files: the sha256 known beforehand, from
``gpuforge.spec.artifact_digests`` or the spec's ``sources.artifact_sha256``; a release file
with none is refused and listed as missing, never recorded as it came). A re-run keeps every
file whose checksum still matches; an index that cannot be reached leaves that repository as the
previous run made it.
``verify_bundle`` re-checks a bundle against the pinned key, then every file against its manifest.
"""

from __future__ import annotations
