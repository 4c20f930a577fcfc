#!/usr/bin/env python3
"""Write an OCI image archive from a root file system tarball.

    oci-image.py --rootfs rootfs.tar --ref registry.example.com/stoker:0.1.0 \\
                 --user stoker --entrypoint /usr/sbin/stokerd --out stoker.oci.tar

The archive is an OCI image layout (oci-layout, index.json, blobs/sha256/)
with one gzip layer, and also carries Docker's manifest.json naming the
same blobs, as `docker save` writes since Docker 25: `docker load` (old and
new), `podman load`, `skopeo copy oci-archive:...` and a registry push
accept it. Everything is content-addressed and reproducible: the same
rootfs.tar and SOURCE_DATE_EPOCH give the same bytes.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import tarfile
import time

MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def json_blob(blobs, obj):
    """Store obj as a canonical JSON blob; returns (sha256 hex, size)."""
    data = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return digest, len(data)


def passwd_ids(rootfs, user):
    """The uid:gid of user in the root file system's /etc/passwd."""
    with tarfile.open(rootfs) as t:
        for name in ("./etc/passwd", "etc/passwd"):
            try:
                f = t.extractfile(name)
            except KeyError:
                continue
            for line in f.read().decode().splitlines():
                fields = line.split(":")
                if fields[0] == user:
                    return f"{fields[2]}:{fields[3]}"
    raise SystemExit(f"oci-image: no user {user} in {rootfs}'s /etc/passwd")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rootfs", required=True, help="root file system as an uncompressed tar")
    p.add_argument("--ref", required=True, help="image reference, e.g. registry.example.com/stoker:0.1.0")
    p.add_argument("--user", required=True, help="user the container runs as (resolved to uid:gid)")
    p.add_argument("--entrypoint", required=True)
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", required=True)
    a = p.parse_args()

    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    tag = a.ref.rsplit(":", 1)[1] if ":" in a.ref.rsplit("/", 1)[-1] else "latest"

    blobs = {}  # sha256 hex -> bytes
    # One pass over the rootfs: the layer's diff_id (the uncompressed
    # digest) is hashed as it is compressed.
    unpacked = hashlib.sha256()
    layer = io.BytesIO()
    with open(a.rootfs, "rb") as src, gzip.GzipFile(fileobj=layer, mode="wb", mtime=0, compresslevel=6) as gz:
        for chunk in iter(lambda: src.read(1 << 20), b""):
            unpacked.update(chunk)
            gz.write(chunk)
    diff_id = unpacked.hexdigest()
    layer = layer.getvalue()
    layer_digest = hashlib.sha256(layer).hexdigest()
    blobs[layer_digest] = layer

    labels = dict(kv.split("=", 1) for kv in a.label)
    labels.setdefault("org.opencontainers.image.version", tag)
    labels.setdefault("org.opencontainers.image.created", created)
    config = {
        "created": created,
        "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine),
        "os": "linux",
        "config": {
            "User": passwd_ids(a.rootfs, a.user),
            "Entrypoint": [a.entrypoint],
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + diff_id]},
        "history": [{"created": created, "created_by": "mmdebstrap + stoker's .debs (scripts/build-image.sh)"}],
    }
    config_digest, config_size = json_blob(blobs, config)

    manifest = {
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": "sha256:" + config_digest, "size": config_size},
        "layers": [{"mediaType": MT_LAYER, "digest": "sha256:" + layer_digest, "size": len(layer)}],
        "annotations": {"org.opencontainers.image.created": created},
    }
    manifest_digest, manifest_size = json_blob(blobs, manifest)

    index = {
        "schemaVersion": 2,
        "mediaType": MT_INDEX,
        "manifests": [{
            "mediaType": MT_MANIFEST, "digest": "sha256:" + manifest_digest, "size": manifest_size,
            # Podman and skopeo name the image by ref.name, containerd and
            # Docker by io.containerd.image.name.
            "annotations": {"org.opencontainers.image.ref.name": a.ref, "io.containerd.image.name": a.ref},
        }],
    }
    docker_manifest = [{"Config": f"blobs/sha256/{config_digest}", "RepoTags": [a.ref],
                        "Layers": [f"blobs/sha256/{layer_digest}"]}]

    files = [("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
             ("index.json", json.dumps(index, sort_keys=True, separators=(",", ":")).encode()),
             ("manifest.json", json.dumps(docker_manifest, separators=(",", ":")).encode())]
    files += [(f"blobs/sha256/{d}", b) for d, b in sorted(blobs.items())]
    tmp = a.out + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as t:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, epoch
            t.addfile(info)
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, epoch
            t.addfile(info, io.BytesIO(data))
    os.replace(tmp, a.out)
    print(f"{a.out}: {a.ref}, manifest sha256:{manifest_digest}, layer {len(layer)} bytes "
          f"({os.path.getsize(a.rootfs)} unpacked)")


if __name__ == "__main__":
    main()
