package kafka

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
	g := newGroup("g", func(client string) string { ids++; return fmt.Sprintf("%s-%d", client, ids) })
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
			r := joinReq{clientID: client, memberID: arg("member", ""), protocolType: "consumer",
				session: dur(arg("session", "10s")), rebalance: dur(arg("rebalance", "20s")), requireID: arg("v3", "") == ""}
			for _, p := range strings.Split(arg("protocols", "range"), ",") {
				r.protocols = append(r.protocols, groupProtocol{name: p})
			}
			g.join(now, r, func(res joinResult) {
				line := fmt.Sprintf("join reply to %s: %s member=%s gen=%d", client, codeName(res.code), res.memberID, res.generation)
				if res.code == 0 {
					line += fmt.Sprintf(" protocol=%s leader=%s", res.protocol, res.leader)
					if res.members != nil {
						var ms []string
						for _, m := range res.members {
							ms = append(ms, m.id)
						}
						line += " members=" + strings.Join(ms, ",")
					}
				}
				out = append(out, line)
			})
		case "sync":
			id := arg("member", "")
			var as []assignment
			if a := arg("assign", ""); a != "" {
				for _, kv := range strings.Split(a, ",") {
					k, v, _ := strings.Cut(kv, ":")
					as = append(as, assignment{memberID: k, data: []byte(v)})
				}
			}
			g.sync(now, id, gen(), nil, nil, as, func(res syncResult) {
				out = append(out, fmt.Sprintf("sync reply to %s: %s assignment=%q", id, codeName(res.code), res.assignment))
			})
		case "heartbeat":
			out = append(out, "heartbeat: "+codeName(g.heartbeat(now, arg("member", ""), gen())))
		case "commit":
			out = append(out, "commit: "+codeName(g.commitCheck(arg("member", ""), gen())))
		case "leave":
			ids := strings.Split(arg("members", ""), ",")
			for i, c := range g.leave(now, ids) {
				out = append(out, fmt.Sprintf("leave %s: %s", ids[i], codeName(c)))
			}
		case "tick":
			now = now.Add(dur(arg("advance", "0s")))
			g.tick(now)
		default:
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
		members := slices.Clone(g.order)
		out = append(out, fmt.Sprintf("state: %s gen=%d leader=%s members=[%s]", g.state, g.generation, g.leader, strings.Join(members, " ")))
		return strings.Join(out, "\n") + "\n"
	})
}
