// Command go-beehive measures KubeEdge's Go beehive (channel context, v1.13.0) on the four
// workloads of `cargo bench --bench mailbox`, with the same sizes and ≈100-byte messages:
//
//	p2p       1 sender → 1 module, 1,000,000 messages
//	sync      100,000 sequential SendSync round trips answered by SendResp (lost answers counted)
//	fanout    100,000 SendToGroup to 8 members (rate in deliveries; reordering counted per member)
//	many2one  8 senders → 1 module, 1,000,000 messages
//
// Each workload runs -runs times; one machine-readable line per workload gives the median:
//
//	workload=p2p msgs=1000000 runs=3 secs=0.2512 rate=3981000 lost=0 reordered=0
//
// Messages are built before timing. The sequence number travels in header.timestamp
// (sender<<32 | index) so receivers can count reordering without decoding content.
// klog output is discarded: Go's beehive logs every full group mailbox and every lost answer,
// and writing those logs is not what is measured here.
//
// For sync, a lost answer costs the caller its whole timeout (-sync-timeout); the rate is the
// answered round trips over the time spent in answered calls, and lost_secs says how long the
// lost calls waited.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kubeedge/beehive/pkg/common"
	beehiveContext "github.com/kubeedge/beehive/pkg/core/context"
	"github.com/kubeedge/beehive/pkg/core/model"
	"k8s.io/klog/v2"
)

const (
	p2pN     = 1_000_000
	syncN    = 100_000
	fanoutN  = 100_000
	members  = 8
	manyN    = 1_000_000
	senders  = 8
	seqShift = 32
	seqMask  = 1<<seqShift - 1
)

var body = strings.Repeat("x", 98) // JSON text "xx…x": 100 bytes, as the Rust bench

func messages(n int, sender int) []model.Message {
	out := make([]model.Message, n)
	for i := range out {
		m := model.NewMessage("").BuildRouter("bench", "resource", "node/n/default/pod/p", "update").FillBody(body)
		m.Header.Timestamp = int64(sender)<<seqShift | int64(i)
		out[i] = *m
	}
	return out
}

// order counts messages that arrive after a later one of the same sender.
type order struct {
	last      [senders]int64
	reordered int
}

func newOrder() *order {
	o := &order{}
	for i := range o.last {
		o.last[i] = -1
	}
	return o
}

func (o *order) see(ts int64) {
	s, i := ts>>seqShift, ts&seqMask
	if i < o.last[s] {
		o.reordered++
	} else {
		o.last[s] = i
	}
}

var moduleSeq int

// addModule registers a fresh module (names never repeat, so runs do not share mailboxes).
func addModule(prefix, group string) string {
	moduleSeq++
	name := fmt.Sprintf("%s-%d", prefix, moduleSeq)
	beehiveContext.AddModule(&common.ModuleInfo{ModuleName: name, ModuleType: common.MsgCtxTypeChannel})
	beehiveContext.AddModuleGroup(name, group)
	return name
}

// receive takes n messages from module, tracking order, and returns what it saw.
func receive(module string, n int, done *sync.WaitGroup, out *int) {
	o := newOrder()
	go func() {
		defer done.Done()
		for k := 0; k < n; k++ {
			m, err := beehiveContext.Receive(module)
			if err != nil {
				fmt.Fprintln(os.Stderr, "receive:", err)
				os.Exit(1)
			}
			o.see(m.Header.Timestamp)
		}
		*out = o.reordered
	}()
}

type result struct {
	secs, rate      float64
	lost, reordered int
	lostSecs        float64
}

func p2p() result {
	sink := addModule("sink", fmt.Sprintf("sinks-%d", moduleSeq))
	msgs := messages(p2pN, 0)
	var wg sync.WaitGroup
	wg.Add(1)
	var reordered int
	start := time.Now()
	receive(sink, p2pN, &wg, &reordered)
	for _, m := range msgs {
		beehiveContext.Send(sink, m)
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	return result{secs: secs, rate: p2pN / secs, reordered: reordered}
}

func manyToOne() result {
	sink := addModule("sink", fmt.Sprintf("sinks-%d", moduleSeq))
	batches := make([][]model.Message, senders)
	for s := range batches {
		batches[s] = messages(manyN/senders, s)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var reordered int
	start := time.Now()
	receive(sink, manyN, &wg, &reordered)
	for _, batch := range batches {
		go func(batch []model.Message) {
			for _, m := range batch {
				beehiveContext.Send(sink, m)
			}
		}(batch)
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	return result{secs: secs, rate: manyN / secs, reordered: reordered}
}

func fanout() result {
	group := fmt.Sprintf("controllers-%d", moduleSeq)
	names := make([]string, members)
	for i := range names {
		names[i] = addModule("member", group)
	}
	msgs := messages(fanoutN, 0)
	var wg sync.WaitGroup
	wg.Add(members)
	reordered := make([]int, members)
	start := time.Now()
	for i, name := range names {
		receive(name, fanoutN, &wg, &reordered[i])
	}
	for _, m := range msgs {
		beehiveContext.SendToGroup(group, m)
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	total := 0
	for _, r := range reordered {
		total += r
	}
	return result{secs: secs, rate: fanoutN * members / secs, reordered: total}
}

func syncRoundTrip(timeout time.Duration) result {
	meta := addModule("meta", fmt.Sprintf("meta-%d", moduleSeq))
	msgs := messages(syncN, 0)
	stop := make(chan struct{})
	go func() {
		for {
			m, err := beehiveContext.Receive(meta)
			if err != nil {
				return
			}
			select {
			case <-stop:
				return
			default:
			}
			beehiveContext.SendResp(*model.NewMessage("").NewRespByMessage(&m, nil))
		}
	}()
	var answered, lostTime time.Duration
	lost := 0
	for _, m := range msgs {
		t := time.Now()
		resp, err := beehiveContext.SendSync(meta, m, timeout)
		took := time.Since(t)
		if err != nil || resp.GetParentID() != m.GetID() {
			lost++
			lostTime += took
		} else {
			answered += took
		}
	}
	close(stop)
	secs := answered.Seconds()
	return result{secs: secs, rate: float64(syncN-lost) / secs, lost: lost, lostSecs: lostTime.Seconds()}
}

func median(rs []result) result {
	sorted := append([]result(nil), rs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].rate < sorted[j].rate })
	m := sorted[len(sorted)/2]
	m.lost, m.reordered, m.lostSecs = 0, 0, 0
	for _, r := range rs {
		m.lost += r.lost
		m.reordered += r.reordered
		m.lostSecs += r.lostSecs
	}
	return m
}

func main() {
	runs := flag.Int("runs", 3, "runs per workload (the median rate is printed; lost and reordered are summed)")
	only := flag.String("only", "", "comma-separated workloads to run (default: all)")
	syncTimeout := flag.Duration("sync-timeout", 50*time.Millisecond, "SendSync timeout; a lost answer waits this long")
	fs := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	flag.Parse()
	klog.SetOutput(io.Discard)

	beehiveContext.InitContext([]string{common.MsgCtxTypeChannel})

	workloads := []struct {
		name string
		msgs int
		run  func() result
	}{
		{"p2p", p2pN, p2p},
		{"sync", syncN, func() result { return syncRoundTrip(*syncTimeout) }},
		{"fanout", fanoutN * members, fanout},
		{"many2one", manyN, manyToOne},
	}
	for _, w := range workloads {
		if *only != "" && !strings.Contains(","+*only+",", ","+w.name+",") {
			continue
		}
		rs := make([]result, *runs)
		for i := range rs {
			rs[i] = w.run()
		}
		m := median(rs)
		fmt.Printf("workload=%s impl=go msgs=%d runs=%d secs=%.4f rate=%.0f lost=%d lost_secs=%.3f reordered=%d\n",
			w.name, w.msgs, *runs, m.secs, m.rate, m.lost, m.lostSecs, m.reordered)
	}
}
