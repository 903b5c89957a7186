"""A stand-in cloud for burst tests, registered through the `launcher.backends`
entry-point group exactly like a third-party plugin (see the .dist-info beside it).
It runs the job on this machine like the local backend, after a short "provisioning"
phase in which it reports PENDING, the way a cloud VM would."""

import time

from launcher.status import JobState, Status
from launcher_backends.local.backend import LocalBackend

PROVISIONING_S = 2.0


class FakeCloudBackend(LocalBackend):
    name = "fakecloud"

    def status(self, handles):
        out = []
        for h, st in zip(handles, super().status(handles)):
            if st.state is JobState.RUNNING and time.time() - h.extra.get("submitted", 0) < PROVISIONING_S:
                st = Status(JobState.PENDING, "provisioning", "provisioning a VM")
            out.append(st)
        return out
