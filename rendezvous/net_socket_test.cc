#include "rendezvous/net_socket.h"

#include <ifaddrs.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

// This host's IPv4 addresses other than loopback.
std::vector<std::string> OwnAddresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof(text));
    if (std::string(text).rfind("127.", 0) != 0) out.push_back(text);
  }
  freeifaddrs(list);
  return out;
}

TEST(LocalAddressTowardTest, TheAddressThatRoutesThere) {
  EXPECT_EQ(*LocalAddressToward("127.0.0.1", 5000), "127.0.0.1");
  const std::string localhost = *LocalAddressToward("localhost", 5000);
  EXPECT_TRUE(localhost.rfind("127.", 0) == 0 || localhost == "::1") << localhost;
  // Toward one of this host's own addresses, the kernel sends from that address.
  for (const std::string& own : OwnAddresses()) {
    absl::StatusOr<std::string> local = LocalAddressToward(own, 5000);
    ASSERT_TRUE(local.ok()) << local.status();
    EXPECT_EQ(*local, own);
  }
  const absl::StatusOr<std::string> bad = LocalAddressToward("no-such-host.invalid", 5000);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("no-such-host.invalid"), std::string::npos);
}

}  // namespace
}  // namespace tpserve
