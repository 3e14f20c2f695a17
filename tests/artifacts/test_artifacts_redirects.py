"""Registries that redirect (issue 25 items 9, 10): credentials stay with the registry's
origin (and the token realm its own challenge names), a storage host's 401 is never taken
for the registry's challenge, and loops, odd schemes and uploads without a Location end in
one RegistryError naming the reference. Hostile servers only: a real registry does none of
this, but a misconfigured proxy or storage in front of one does."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from k8sjobs.artifacts import AuthenticationError, Registry, RegistryError

from .artifact_helpers import FAST_RETRY
from .hostile_registry import HostileRegistry, digest_of, file_layer, manifest_for

SECRET = "S3cret-of-the-registry"
DATA = b"the blob's bytes\n" * 100


def _registry(hostile: HostileRegistry) -> Registry:
    return Registry(
        hostile.location, plain_http=True, username="robot", password=SECRET, retry=FAST_RETRY
    )


def _serving(**kwargs: object) -> HostileRegistry:
    hostile = HostileRegistry(basic_user=("robot", SECRET), **kwargs)  # type: ignore[arg-type]
    hostile.put("v1", manifest_for([file_layer("data.txt", DATA)]), {"data.txt": DATA})
    return hostile


async def test_a_storage_hosts_challenge_never_gets_the_registrys_credentials(
    tmp_path: Path,
) -> None:
    """Item 9: a blob GET answered 307 to a storage host, which answered 401 with a bearer
    realm on a third host; the registry's Basic credentials went to that third host (failed
    on main). No credential of the registry leaves its origin."""
    async with HostileRegistry() as third:
        challenge = f'Bearer realm="http://{third.location}/token",service="storage"'
        async with HostileRegistry(challenge=challenge) as storage:
            redirect = f"http://{storage.location}/bucket/blobs/{{digest}}"
            async with _serving(blob_redirect=redirect) as hostile, _registry(hostile) as store:
                with pytest.raises(AuthenticationError) as caught:
                    await store.pull("team/x:v1", tmp_path / "out")
    message = str(caught.value)
    assert "team/x:v1" in message and storage.location in message and "401" in message
    assert third.requests == [] and third.authorizations == []
    assert storage.authorizations == []
    assert not (tmp_path / "out" / "data.txt").exists()


async def test_a_storage_host_that_refuses_is_named_in_the_error(tmp_path: Path) -> None:
    """A 403 from the storage host (an expired pre-signed URL, a bucket policy) names that
    host, not the registry, as the one that refused."""
    async with HostileRegistry(refuse=403) as storage:
        redirect = f"http://{storage.location}/bucket/blobs/{{digest}}"
        async with _serving(blob_redirect=redirect) as hostile, _registry(hostile) as store:
            with pytest.raises(AuthenticationError) as caught:
                await store.pull("team/x:v1", tmp_path / "out")
    assert storage.location in str(caught.value) and "HTTP 403" in str(caught.value)
    assert storage.authorizations == []


async def test_a_redirect_to_storage_is_followed_without_the_credentials(tmp_path: Path) -> None:
    """What S3 and GCS behind a registry do: the blob comes from the storage host, which
    sees no Authorization (the pre-signed URL is its own)."""
    async with HostileRegistry() as storage:
        storage.blobs[digest_of(DATA)] = DATA
        redirect = f"http://{storage.location}/bucket/blobs/{{digest}}?X-Amz-Signature=abc"
        async with _serving(blob_redirect=redirect) as hostile, _registry(hostile) as store:
            await store.pull("team/x:v1", tmp_path / "out")
    assert (tmp_path / "out" / "data.txt").read_bytes() == DATA
    assert storage.authorizations == []
    assert [m for m, _ in storage.requests] == ["GET"]
    basic = "Basic " + base64.b64encode(f"robot:{SECRET}".encode()).decode()
    assert basic in hostile.authorizations


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_blob_that_redirects_to_itself_is_one_error_naming_the_reference(
    tmp_path: Path, status: int
) -> None:
    """Item 10: a blob redirecting to itself ended in a ~60-line TooManyRedirects
    traceback (failed on main)."""
    hostile = _serving(redirect_status=status)
    async with hostile, _registry(hostile) as store:
        hostile.blob_redirect = f"http://{hostile.location}/v2/team/x/blobs/{{digest}}"
        with pytest.raises(RegistryError, match=r"team/x:v1.*a loop"):
            await store.pull("team/x:v1", tmp_path / "out")


async def test_a_redirect_chain_past_the_limit_is_one_error(tmp_path: Path) -> None:
    hostile = _serving()
    async with hostile, _registry(hostile) as store:
        hostile.blob_redirect = f"http://{hostile.location}/v2/team/x/blobs/{{digest}}x"
        with pytest.raises(RegistryError, match=r"team/x:v1: more than 10 redirects"):
            await store.pull("team/x:v1", tmp_path / "out")


@pytest.mark.parametrize(
    "location", ["file:///etc/passwd", "ftp://127.0.0.1/x", "gopher://127.0.0.1:70/x"]
)
async def test_a_redirect_to_another_scheme_is_refused_naming_the_reference(
    tmp_path: Path, location: str
) -> None:
    """Item 10: a redirect to file:///etc/passwd ended in NonHttpUrlRedirectClientError
    (failed on main)."""
    async with _serving(blob_redirect=location) as hostile, _registry(hostile) as store:
        with pytest.raises(RegistryError, match=r"team/x:v1.*only http and https"):
            await store.pull("team/x:v1", tmp_path / "out")
    assert not (tmp_path / "out" / "data.txt").exists()


async def test_a_redirect_without_location_is_one_error(tmp_path: Path) -> None:
    async with _serving(blob_redirect="") as hostile, _registry(hostile) as store:
        with pytest.raises(RegistryError, match=r"team/x:v1.*HTTP 307 \(a redirect\) with no"):
            await store.pull("team/x:v1", tmp_path / "out")


async def test_an_upload_answered_202_without_location_is_one_error(tmp_path: Path) -> None:
    """Item 10: ended in ``KeyError: 'Location'`` (failed on main)."""
    (tmp_path / "f.txt").write_text("data\n")
    async with HostileRegistry(upload_location=False) as hostile, _registry(hostile) as store:
        with pytest.raises(
            RegistryError, match=r"team/x:v1: the registry answered HTTP 202 without the Location"
        ):
            await store.push("team/x:v1", [tmp_path / "f.txt"])


async def test_a_token_realm_in_clear_text_gets_no_credentials_from_an_https_store() -> None:
    """The registry's own challenge may name a realm on another host (Docker Hub does), but
    never one that would carry the credentials in clear text from a TLS store."""
    from k8sjobs.artifacts._auth import Challenge, Credentials
    from k8sjobs.artifacts._http import RetryPolicy, Timeouts, Transport

    creds = Credentials("robot", SECRET)
    transport = Transport(
        plain_http=False, ca_file=None, credentials=creds, timeouts=Timeouts(), retry=RetryPolicy()
    )
    challenge = Challenge("bearer", {"realm": "http://127.0.0.1:9/token"})
    try:
        with pytest.raises(AuthenticationError, match="plain-http token realm") as caught:
            await transport._fetch_token("r.example", challenge, "repository:x:pull", creds)
    finally:
        await transport.close()
    assert SECRET not in str(caught.value)
