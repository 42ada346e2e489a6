// A minimal OCI image for tests of the oci runtime: a root filesystem with
// the static busybox of Debian's busybox-static package and its applets.
#pragma once

#include <string>

namespace tide::agent::testing {

// Where the static busybox is found ("" when not installed).
std::string StaticBusybox();
// Lays out a rootfs at `dir` (created): /bin/busybox, a link per applet in
// /bin, /etc/passwd with root. False when there is no static busybox.
bool MakeBusyboxImage(const std::string& dir);

}  // namespace tide::agent::testing
