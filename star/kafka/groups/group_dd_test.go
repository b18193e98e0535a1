package groups

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestGroupScenarios runs the group state machine over
// testdata/group.txt: one group, a clock that moves only by tick, member
// ids drawn as <client>-<n>. Commands:
//
//	join client=C [member=ID] [protocols=P,Q] [session=DUR] [rebalance=DUR] [v3]
//	sync member=ID gen=N [assign=ID:DATA,…]
//	heartbeat member=ID gen=N
//	commit member=ID gen=N
//	leave members=ID,…
//	tick advance=DUR
//
// join defaults to protocols=range, session=10s, rebalance=20s, and a
// v4 client (MEMBER_ID_REQUIRED for a join without an id; v3 joins at
// once). The output is every reply the command caused, in order (a
// join's or sync's may come later, in another command's output), then the
// group's state.
func TestGroupScenarios(t *testing.T) {
	ids := 0
	g := New("g", func(client string) string { ids++; return fmt.Sprintf("%s-%d", client, ids) })
	now := time.Unix(1000, 0)
	var out []string
	codeName := func(code int16) string {
		if code == 0 {
			return "ok"
		}
		if e, ok := kerr.ErrorForCode(code).(*kerr.Error); ok {
			return e.Message
		}
		return strconv.Itoa(int(code))
	}
	datadriven.RunTest(t, "testdata/group.txt", func(t *testing.T, d *datadriven.TestData) string {
		out = out[:0]
		arg := func(key, def string) string {
			for _, a := range d.CmdArgs {
				if a.Key == key {
					if len(a.Vals) == 0 {
						return "true"
					}
					return strings.Join(a.Vals, ",")
				}
			}
			return def
		}
		dur := func(s string) time.Duration {
			v, err := time.ParseDuration(s)
			if err != nil {
				d.Fatalf(t, "duration %q: %v", s, err)
			}
			return v
		}
		gen := func() int32 {
			n, err := strconv.Atoi(arg("gen", "-1"))
			if err != nil {
				d.Fatalf(t, "gen: %v", err)
			}
			return int32(n)
		}
		switch d.Cmd {
		case "join":
			client := arg("client", "")
			r := JoinReq{ClientID: client, MemberID: arg("member", ""), ProtocolType: "consumer",
				Session: dur(arg("session", "10s")), Rebalance: dur(arg("rebalance", "20s")), RequireID: arg("v3", "") == ""}
			for _, p := range strings.Split(arg("protocols", "range"), ",") {
				r.Protocols = append(r.Protocols, Protocol{Name: p})
			}
			g.Join(now, r, func(res JoinResult) {
				line := fmt.Sprintf("join reply to %s: %s member=%s gen=%d", client, codeName(res.Code), res.MemberID, res.Generation)
				if res.Code == 0 {
					line += fmt.Sprintf(" protocol=%s leader=%s", res.Protocol, res.Leader)
					if res.Members != nil {
						var ms []string
						for _, m := range res.Members {
							ms = append(ms, m.ID)
						}
						line += " members=" + strings.Join(ms, ",")
					}
				}
				out = append(out, line)
			})
		case "sync":
			id := arg("member", "")
			var as []Assignment
			if a := arg("assign", ""); a != "" {
				for _, kv := range strings.Split(a, ",") {
					k, v, _ := strings.Cut(kv, ":")
					as = append(as, Assignment{MemberID: k, Data: []byte(v)})
				}
			}
			g.Sync(now, id, gen(), nil, nil, as, func(res SyncResult) {
				out = append(out, fmt.Sprintf("sync reply to %s: %s assignment=%q", id, codeName(res.Code), res.Assignment))
			})
		case "heartbeat":
			out = append(out, "heartbeat: "+codeName(g.Heartbeat(now, arg("member", ""), gen())))
		case "commit":
			out = append(out, "commit: "+codeName(g.CommitCheck(arg("member", ""), gen())))
		case "leave":
			ids := strings.Split(arg("members", ""), ",")
			for i, c := range g.Leave(now, ids) {
				out = append(out, fmt.Sprintf("leave %s: %s", ids[i], codeName(c)))
			}
		case "tick":
			now = now.Add(dur(arg("advance", "0s")))
			g.Tick(now)
		default:
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
		members := slices.Clone(g.Order)
		out = append(out, fmt.Sprintf("state: %s gen=%d leader=%s members=[%s]", g.State, g.Generation, g.Leader, strings.Join(members, " ")))
		return strings.Join(out, "\n") + "\n"
	})
}
