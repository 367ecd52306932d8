"""Result bundles: a run directory with a manifest, an OpenSSH signature over it, packed as .tar.gz.

    manifest    sha256 and size of every file (schema version, run id, created-at)
    sign        the one module that runs `ssh-keygen -Y sign/verify` (fixed namespace)
    dsse        attestation.intoto.json: an in-toto statement of the files, DSSE-signed with the
                same ed25519 key (the one module that uses `cryptography`)
    pack        .tar.gz packing and safe opening (no links, no escapes, bounded sizes)
    archive_stream  one gzip member, one tar, nothing after its end-of-archive marker
    verify      signature by an allowed signer, hashes, no unlisted file, attestation, schema
    seal        a finished run directory made a signed bundle, refusing one that leaks a secret
    verdict_attestation  <bundle>.verdict.intoto.json: a verdict against a card, beside the
                bundle, as an in-toto statement DSSE-signed (made after the bundle is sealed)
    schema      results.json against its schema (bench.results' models)
    provenance  what a run's records say about where its figures come from
    recipe      recipe.json: the commands that re-create a run, and the pins they name
    command     `bench keygen | sign | pack | verify | schema`

Anyone can check a bundle with stock OpenSSH; see docs/verify.md.
"""
