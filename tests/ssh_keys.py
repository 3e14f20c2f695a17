"""A fixed, obviously fake key pair: renders stay deterministic (golden files, hashes).

It is no key at all (no ssh would accept it); tests that run a real ssh make a real one.
"""

from k8sjobs.render.multinode import SshKey

TEST_KEY = SshKey(
    public="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHRlc3Qta2V5LW5vdC1hLXJlYWwta2V5LWF0LWFsbA test\n",
    private="-----BEGIN OPENSSH PRIVATE KEY-----\ntest-only, not a key\n"
    "-----END OPENSSH PRIVATE KEY-----\n",
)
