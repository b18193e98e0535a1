package kafka

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// served is every request this face serves, with the versions: exactly
// what ApiVersions advertises (docs/kafka.md lists them with reasons).
// Produce starts at 3 and Fetch at 4, the first versions of record batch
// v2; Fetch stops at 12 and Produce at 11, the last that name topics
// (later ones name topic ids only). After SaslHandshake v0 the SASL
// message comes as a bare frame, after v1 in SaslAuthenticate: both are
// served (librdkafka will not authenticate with a broker that lacks v0).
// The group requests stop before the versions of KIP-848's consumer
// protocol and of topic ids; OffsetFetch v0 read ZooKeeper's offsets.
// InitProducerId serves idempotent producers, not transactions; 5 is
// KIP-890's, for transactions.
var served = []kmsg.ApiVersionsResponseApiKey{
	{ApiKey: 0, MinVersion: 3, MaxVersion: 11}, // Produce
	{ApiKey: 1, MinVersion: 4, MaxVersion: 12}, // Fetch
	{ApiKey: 2, MinVersion: 1, MaxVersion: 6},  // ListOffsets
	{ApiKey: 3, MinVersion: 0, MaxVersion: 12}, // Metadata
	{ApiKey: 8, MinVersion: 0, MaxVersion: 8},  // OffsetCommit
	{ApiKey: 9, MinVersion: 1, MaxVersion: 8},  // OffsetFetch
	{ApiKey: 10, MinVersion: 0, MaxVersion: 4}, // FindCoordinator
	{ApiKey: 11, MinVersion: 0, MaxVersion: 9}, // JoinGroup
	{ApiKey: 12, MinVersion: 0, MaxVersion: 4}, // Heartbeat
	{ApiKey: 13, MinVersion: 0, MaxVersion: 5}, // LeaveGroup
	{ApiKey: 14, MinVersion: 0, MaxVersion: 5}, // SyncGroup
	{ApiKey: 15, MinVersion: 0, MaxVersion: 5}, // DescribeGroups
	{ApiKey: 16, MinVersion: 0, MaxVersion: 4}, // ListGroups
	{ApiKey: 17, MinVersion: 0, MaxVersion: 1}, // SaslHandshake
	{ApiKey: 18, MinVersion: 0, MaxVersion: 3}, // ApiVersions
	{ApiKey: 19, MinVersion: 0, MaxVersion: 7}, // CreateTopics
	{ApiKey: 20, MinVersion: 0, MaxVersion: 6}, // DeleteTopics
	{ApiKey: 22, MinVersion: 0, MaxVersion: 4}, // InitProducerId
	{ApiKey: 32, MinVersion: 0, MaxVersion: 4}, // DescribeConfigs
	{ApiKey: 36, MinVersion: 0, MaxVersion: 2}, // SaslAuthenticate
	{ApiKey: 37, MinVersion: 0, MaxVersion: 3}, // CreatePartitions
	{ApiKey: 42, MinVersion: 0, MaxVersion: 2}, // DeleteGroups
	{ApiKey: 60, MinVersion: 0, MaxVersion: 1}, // DescribeCluster
}

// servedVersion reports whether key is served at version.
func servedVersion(key, version int16) bool {
	i := slices.IndexFunc(served, func(k kmsg.ApiVersionsResponseApiKey) bool { return k.ApiKey == key })
	return i >= 0 && version >= served[i].MinVersion && version <= served[i].MaxVersion
}

// apiVersions answers ApiVersions. A version above ours gets the v0
// answer with UNSUPPORTED_VERSION and our keys (KIP-511), from which the
// client picks a version we serve and asks again.
func apiVersions(version int16) kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = version
	if !servedVersion(18, version) {
		resp.Version = 0
		resp.ErrorCode = kerr.UnsupportedVersion.Code
	}
	resp.ApiKeys = slices.Clone(served)
	return resp
}
