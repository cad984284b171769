// Every command of the server, through a real TCP connection to an in-process
// server (docs/protocol.md is the contract).
#include "prefixkv/server.h"

#include <gtest/gtest.h>

#include <numeric>

#include "blob_store.h"
#include "tests/server/server_fixture.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::Reply;

class ServerTest : public testing::ServerFixture {};

TEST_F(ServerTest, AnswersPingAndEcho) {
  StartServer();
  auto c = Connect();
  EXPECT_EQ(c->Call({"PING"}).str, "PONG");
  EXPECT_EQ(c->Call({"ping", "hello"}).str, "hello");
  EXPECT_EQ(c->Call({"ECHO", std::string("a\0b", 3)}).str, std::string("a\0b", 3));
}

TEST_F(ServerTest, StoresAndReturnsBinaryValues) {
  StartServer();
  auto c = Connect();
  std::string value;
  for (int i = 0; i < 256; ++i) value += static_cast<char>(i);
  EXPECT_EQ(c->Call({"SET", "k", value}).str, "OK");
  Reply got = c->Call({"GET", "k"});
  EXPECT_EQ(got.type, '$');
  EXPECT_EQ(got.str, value);
  EXPECT_EQ(c->Call({"SET", "k", "v2"}).str, "OK");
  EXPECT_EQ(c->Call({"GET", "k"}).str, "v2");
  EXPECT_TRUE(c->Call({"GET", "missing"}).null);
}

TEST_F(ServerTest, StoresRawKeysUnderTheirHashedBlockKeyWithAZeroNamespace) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "user:1", "v"}).str, "OK");
  StatusOr<BlockMeta> meta = hot_->Peek(server::BlobStore::RawKey("user:1"));
  ASSERT_OK(meta);
  EXPECT_TRUE(meta->namespace_id.IsZero());
  EXPECT_NE(server::BlobStore::RawKey("user:1"), server::BlobStore::RawKey("user:2"));
}

TEST_F(ServerTest, ServesLargeValuesIntact) {
  StartServer();
  auto c = Connect();
  std::string big(3 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4093) big[i] = static_cast<char>(i);
  ASSERT_EQ(c->Call({"SET", "big", big}).str, "OK");
  EXPECT_EQ(c->Call({"GET", "big"}).str, big);
}

TEST_F(ServerTest, DeletesAndCountsExistingKeys) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"MSET", "a", "1", "b", "2", "c", "3"}).str, "OK");
  EXPECT_EQ(c->Call({"EXISTS", "a", "b", "zz", "a"}).integer, 3);
  EXPECT_EQ(c->Call({"DEL", "a", "zz"}).integer, 1);
  EXPECT_EQ(c->Call({"EXISTS", "a"}).integer, 0);
  Reply m = c->Call({"MGET", "a", "b", "c"});
  ASSERT_EQ(m.elems.size(), 3u);
  EXPECT_TRUE(m.elems[0].null);
  EXPECT_EQ(m.elems[1].str, "2");
  EXPECT_EQ(m.elems[2].str, "3");
}

TEST_F(ServerTest, WritesEvictedValuesBackAndPromotesThemOnRead) {
  StartServer(/*hot_capacity_bytes=*/8 << 10);  // room for one 4 KiB value
  auto c = Connect();
  std::string a(4000, 'a'), b(4000, 'b');
  ASSERT_EQ(c->Call({"SET", "a", a}).str, "OK");
  ASSERT_EQ(c->Call({"SET", "b", b}).str, "OK");  // evicts "a" to the lower tier
  EXPECT_FALSE(hot_->Contains(server::BlobStore::RawKey("a")));
  EXPECT_EQ(c->Call({"GET", "a"}).str, a);
  EXPECT_TRUE(hot_->Contains(server::BlobStore::RawKey("a")));
  EXPECT_EQ(c->Call({"GET", "b"}).str, b);
  EXPECT_EQ(c->Call({"DEL", "a", "b"}).integer, 2);
  EXPECT_EQ(c->Call({"EXISTS", "a", "b"}).integer, 0);
}

TEST_F(ServerTest, StoresValuesLargerThanTheHotTierDirectlyBelowIt) {
  StartServer(/*hot_capacity_bytes=*/8 << 10);
  auto c = Connect();
  std::string big(64 << 10, 'z');
  ASSERT_EQ(c->Call({"SET", "big", "small"}).str, "OK");
  ASSERT_EQ(c->Call({"SET", "big", big}).str, "OK");
  EXPECT_EQ(c->Call({"GET", "big"}).str, big);  // not the stale hot copy
}

TEST_F(ServerTest, ReportsWrongArityAndUnknownCommands) {
  StartServer();
  auto c = Connect();
  EXPECT_EQ(c->Call({"GET"}).str, "ERR wrong number of arguments for 'get' command");
  EXPECT_EQ(c->Call({"GET", "a", "b"}).str,
            "ERR wrong number of arguments for 'get' command");
  EXPECT_EQ(c->Call({"MSET", "a", "1", "b"}).str,
            "ERR wrong number of arguments for 'mset' command");
  EXPECT_EQ(c->Call({"SET", "a", "1", "EX", "10"}).str, "ERR syntax error");
  EXPECT_EQ(c->Call({"FLUSHALL"}).str,
            "ERR unknown command 'FLUSHALL', with args beginning with: ");
  EXPECT_EQ(c->Call({"PING"}).str, "PONG");  // the connection is still usable
}

TEST_F(ServerTest, RequiresAuthWhenAPasswordIsSet) {
  options_.requirepass = "s3cret";
  StartServer();
  auto c = Connect();
  EXPECT_EQ(c->Call({"GET", "k"}).str, "NOAUTH Authentication required.");
  EXPECT_EQ(c->Call({"NOSUCH"}).str, "NOAUTH Authentication required.");
  EXPECT_EQ(c->Call({"AUTH", "wrong"}).type, '-');
  EXPECT_EQ(c->Call({"SET", "k", "v"}).str, "NOAUTH Authentication required.");
  EXPECT_EQ(c->Call({"AUTH", "s3cret"}).str, "OK");
  EXPECT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  auto other = Connect();  // authentication is per connection
  EXPECT_EQ(other->Call({"GET", "k"}).str, "NOAUTH Authentication required.");
  EXPECT_EQ(other->Call({"AUTH", "default", "s3cret"}).str, "OK");
  EXPECT_EQ(other->Call({"GET", "k"}).str, "v");
}

TEST_F(ServerTest, RejectsAuthWhenNoPasswordIsSet) {
  StartServer();
  auto c = Connect();
  EXPECT_TRUE(c->Call({"AUTH", "x"}).IsError());
  EXPECT_EQ(c->Call({"PING"}).str, "PONG");
}

TEST_F(ServerTest, NegotiatesOnlyProtocolTwoWithHello) {
  options_.requirepass = "pw";
  StartServer();
  auto c = Connect();
  EXPECT_EQ(c->Call({"HELLO", "3"}).str.rfind("NOPROTO", 0), 0u);
  EXPECT_EQ(c->Call({"HELLO", "2"}).str.rfind("NOAUTH", 0), 0u);
  Reply hello = c->Call({"HELLO", "2", "AUTH", "default", "pw"});
  ASSERT_EQ(hello.type, '*');
  ASSERT_EQ(hello.elems.size(), 14u);
  EXPECT_EQ(hello.elems[1].str, "prefixkv");
  EXPECT_EQ(hello.elems[5].integer, 2);
  EXPECT_EQ(c->Call({"GET", "x"}).type, '$');  // authenticated by HELLO
  EXPECT_TRUE(c->Call({"HELLO", "x"}).IsError());
}

TEST_F(ServerTest, ReportsEveryTierCounterInInfo) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  std::string info = c->Call({"INFO"}).str;
  for (const char* field :
       {"# Server", "tcp_port:", "connected_clients:1",
        "total_commands_processed:", "# Tier_mem", "mem_entries:1", "mem_bytes:",
        "mem_pinned_bytes:", "mem_hits:", "mem_misses:", "mem_inserts:1", "mem_removes:",
        "mem_evictions:", "mem_spills:", "mem_corruptions:", "mem_io_errors:"}) {
    EXPECT_NE(info.find(field), std::string::npos) << field << "\n" << info;
  }
  std::string tiers_only = c->Call({"INFO", "tiers"}).str;
  EXPECT_EQ(tiers_only.find("# Server"), std::string::npos);
  EXPECT_NE(tiers_only.find("mem_entries"), std::string::npos);
}

TEST_F(ServerTest, DescribesItsCommandsForRedisCli) {
  StartServer();
  auto c = Connect();
  int64_t count = c->Call({"COMMAND", "COUNT"}).integer;
  EXPECT_GE(count, 20);
  EXPECT_EQ(static_cast<int64_t>(c->Call({"COMMAND"}).elems.size()), count);
  Reply info = c->Call({"COMMAND", "INFO", "get", "nosuch"});
  ASSERT_EQ(info.elems.size(), 2u);
  EXPECT_EQ(info.elems[0].elems[0].str, "get");
  EXPECT_EQ(info.elems[0].elems[1].integer, 2);
  EXPECT_TRUE(info.elems[1].null);
  EXPECT_EQ(c->Call({"COMMAND", "DOCS"}).type, '*');
  EXPECT_EQ(c->Call({"CONFIG", "GET", "appendonly"}).elems.size(), 2u);
  EXPECT_EQ(c->Call({"SELECT", "0"}).str, "OK");
  EXPECT_TRUE(c->Call({"SELECT", "1"}).IsError());
}

TEST_F(ServerTest, QuitRepliesThenCloses) {
  StartServer();
  auto c = Connect();
  ASSERT_TRUE(
      c->SendRaw(testing::EncodeCommand({"QUIT"}) + testing::EncodeCommand({"PING"})));
  EXPECT_EQ(c->Read().str, "OK");
  EXPECT_TRUE(c->ReadsEof());  // the PING after QUIT is never run
}

TEST_F(ServerTest, StoresVerifiedBlocksAndMatchesTheirPrefix) {
  StartServer();
  auto c = Connect();
  BlockKey root = NamespaceRootFromFingerprint("server-test");
  std::vector<int32_t> tokens(12);
  std::iota(tokens.begin(), tokens.end(), 100);
  std::vector<std::string> chain = testing::EncodedChain(root, tokens, 4);
  std::vector<BlockKey> keys = ChainKeys(root, tokens, 4);
  ASSERT_EQ(c->Call({"PKV.PUT", chain[0]}).str, "OK");
  ASSERT_EQ(c->Call({"PKV.PUT", chain[1]}).str, "OK");
  // Blocks 0 and 1 are stored; block 2 is not, so the match is two blocks long.
  Reply m = c->Call({"PKV.MATCH", root.ToHex(), "4", testing::TokenBlob(tokens)});
  ASSERT_EQ(m.elems.size(), 2u);
  EXPECT_EQ(m.elems[0].integer, 2);
  ASSERT_EQ(m.elems[1].elems.size(), 2u);
  EXPECT_EQ(m.elems[1].elems[0].str, keys[0].ToHex());  // the ChainKeys of the prefix
  EXPECT_EQ(m.elems[1].elems[1].str, keys[1].ToHex());
  EXPECT_EQ(c->Call({"PKV.GET", keys[1].ToHex()}).str, chain[1]);
  EXPECT_TRUE(c->Call({"PKV.GET", keys[2].ToHex()}).null);
  StatusOr<BlockMeta> meta = hot_->Peek(keys[1]);
  ASSERT_OK(meta);
  EXPECT_EQ(meta->parent, keys[0]);
  EXPECT_EQ(meta->namespace_id, root);
}

TEST_F(ServerTest, RejectsDamagedBlockRecordsAndStoresNothing) {
  StartServer();
  auto c = Connect();
  BlockKey root = NamespaceRootFromFingerprint("server-test");
  std::string record = testing::EncodedChain(root, {1, 2, 3, 4}, 4)[0];
  record[record.size() - 1] ^= 0x40;
  EXPECT_EQ(c->Call({"PKV.PUT", record}).str.rfind("ERR invalid block record", 0), 0u);
  EXPECT_TRUE(c->Call({"PKV.PUT", "not a record"}).IsError());
  EXPECT_EQ(hot_->Totals().entries, 0u);
  EXPECT_EQ(ssd_->Totals().entries, 0u);
}

TEST_F(ServerTest, ValidatesMatchArguments) {
  StartServer();
  auto c = Connect();
  std::string root = NamespaceRootFromFingerprint("x").ToHex();
  EXPECT_TRUE(c->Call({"PKV.MATCH", "zz", "4", ""}).IsError());
  EXPECT_TRUE(c->Call({"PKV.MATCH", root, "0", ""}).IsError());
  EXPECT_TRUE(c->Call({"PKV.MATCH", root, "-4", ""}).IsError());
  EXPECT_TRUE(c->Call({"PKV.MATCH", root, "4", "abc"}).IsError());
  EXPECT_TRUE(c->Call({"PKV.GET", "0123"}).IsError());
  EXPECT_EQ(c->Call({"PKV.MATCH", root, "4", ""}).elems[0].integer, 0);
}

TEST_F(ServerTest, ReportsStatsAndACleanAudit) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  Reply stats = c->Call({"PKV.STATS"});
  ASSERT_EQ(stats.elems.size(), 2u * 2u * 11u);  // two tiers, 11 counters each
  EXPECT_EQ(stats.elems[0].str, "mem.entries");
  EXPECT_EQ(stats.elems[1].integer, 1);
  Reply audit = c->Call({"PKV.AUDIT"});
  EXPECT_EQ(audit.type, '*');
  EXPECT_TRUE(audit.elems.empty());
}

TEST_F(ServerTest, AnswersPipelinedCommandsInOrder) {
  StartServer();
  auto c = Connect();
  std::string batch;
  for (int i = 0; i < 200; ++i) {
    batch += testing::EncodeCommand({"SET", "k" + std::to_string(i), std::to_string(i)});
    batch += testing::EncodeCommand({"GET", "k" + std::to_string(i)});
  }
  ASSERT_TRUE(c->SendRaw(batch));
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(c->Read().str, "OK");
    EXPECT_EQ(c->Read().str, std::to_string(i));
  }
}

TEST_F(ServerTest, FinishesAcceptedCommandsOnStop) {
  StartServer();
  auto c = Connect();
  ASSERT_EQ(c->Call({"SET", "k", "v"}).str, "OK");
  server_->Stop();
  EXPECT_TRUE(c->ReadsEof());
  EXPECT_TRUE(hot_->Contains(server::BlobStore::RawKey("k")));
  EXPECT_FALSE(testing::RespClient(server_->port()).connected());
}

}  // namespace
}  // namespace prefixkv
