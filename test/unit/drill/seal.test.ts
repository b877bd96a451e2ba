// strace's connect() lines as the sealed drill counts them: IPv4 and IPv6 destinations with what connect returned;
// unix sockets (the file system, not the network) are not attempts. Lines as strace 6.1 writes them with -f -o.
import { describe, expect, it } from "vitest";
import { connectAttempts } from "../../../src/drill/seal.js";

describe("connectAttempts", () => {
  it("reads IPv4 and IPv6 destinations and results, and leaves unix sockets out", () => {
    const trace = [
      '31679 connect(18, {sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("10.255.255.1")}, 16) = -1 ENETUNREACH (Network is unreachable)',
      '31679 connect(18, {sa_family=AF_INET, sin_port=htons(9), sin_addr=inet_addr("127.0.0.1")}, 16) = -1 EINPROGRESS (Operation now in progress)',
      '31680 connect(5, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "2001:db8::1", &sin6_addr), sin6_scope_id=0}, 28) = -1 ENETUNREACH (Network is unreachable)',
      '31681 connect(7, {sa_family=AF_UNIX, sun_path="/var/run/nscd/socket"}, 110) = -1 ENOENT (No such file or directory)',
      '31682 connect(8, {sa_family=AF_INET, sin_port=htons(5432), sin_addr=inet_addr("127.0.0.1")}, 16 <unfinished ...>',
      "31682 +++ exited with 0 +++",
    ].join("\n");
    expect(connectAttempts(trace).map((a) => [a.to, a.result])).toEqual([
      ["10.255.255.1:80", "ENETUNREACH"],
      ["127.0.0.1:9", "EINPROGRESS"],
      ["[2001:db8::1]:443", "ENETUNREACH"],
      ["127.0.0.1:5432", "unfinished"],
    ]);
  });
});
