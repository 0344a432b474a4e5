package reporter

import (
	"slices"
	"sort"
)

// What the reporter keeps to notice a control plane restored from a backup
// under it, and to know what to send again and what is lost for good.

// maxArrivalMarks bounds the arrival log (16 bytes a mark, one per
// acknowledged batch that the control plane numbered records for). When it
// is full, the older half is merged in pairs, so a restore to an older
// backup makes the reporter go back further than it needed (sending more
// again, each stored once), never less far.
const maxArrivalMarks = 4096

// maxAckedRuns bounds the attempt ids remembered as acknowledged (16 bytes
// a run: ids acknowledged in order make one run, each id skipped, rolled
// back or refused splits one). Beyond it the lowest runs are forgotten.
const maxAckedRuns = 10_000

// arrivalLog maps the control plane's arrival numbers to what the reporter
// sent. The control plane numbers the records it stores, per tenant, in
// the order its reports commit (Answer.Arrival); a restore from a backup
// takes its highest number held back with the records it loses, also
// records stored under attempt ids below its cursor (attempts that
// committed late, sent as gap records or by a start's lookback), which the
// cursor does not show.
type arrivalLog struct {
	// known is whether the control plane answered arrival numbers yet.
	known bool
	// acked is the highest arrival number the control plane acknowledged.
	acked int64
	// floor is where the log begins: the numbers up to it were given before
	// (to a reporter before this one, or while the control plane did not
	// answer numbers), and nothing is known of them.
	floor int64
	// marks, in ascending upTo: the numbers above the previous mark's upTo
	// (or floor) up to upTo were given to batches whose lowest attempt id is
	// minID, or above.
	marks []arrivalMark
}

type arrivalMark struct{ upTo, minID int64 }

// begin starts the log at held, the control plane's highest arrival number.
func (l *arrivalLog) begin(held int64) {
	l.known, l.acked, l.floor, l.marks = true, held, held, l.marks[:0]
}

// add notes that the control plane's numbers up to upTo were given by the
// time it acknowledged a batch whose lowest attempt id is minID.
func (l *arrivalLog) add(upTo, minID int64) {
	if upTo <= l.acked {
		return // it numbered nothing since: the batch's records were held
	}
	if len(l.marks) == maxArrivalMarks {
		// The older half, merged in pairs: a merged mark answers the lower
		// of the two ids, so going back from it resends more, never less.
		half := len(l.marks) / 2
		for i := range half / 2 {
			a, b := l.marks[2*i], l.marks[2*i+1]
			l.marks[i] = arrivalMark{upTo: b.upTo, minID: min(a.minID, b.minID)}
		}
		l.marks = append(l.marks[:half/2], l.marks[half:]...)
	}
	l.marks = append(l.marks, arrivalMark{upTo: upTo, minID: minID})
	l.acked = upTo
}

// lose takes held, the control plane's highest arrival number, below
// acked: the records numbered above it are lost. It returns the lowest
// attempt id of the batches they were given to (ok false when the log
// holds none) and whether the log covers all of them (held not below its
// floor), and the log then goes on from held. The mark of the numbers
// held is cut at held, not dropped: a second restore may lose them too.
func (l *arrivalLog) lose(held int64) (minID int64, ok, covered bool) {
	i := sort.Search(len(l.marks), func(i int) bool { return l.marks[i].upTo > held })
	covered = held >= l.floor
	if !covered {
		i = 0
	}
	for _, m := range l.marks[i:] {
		if !ok || m.minID < minID {
			minID, ok = m.minID, true
		}
	}
	keep := i
	if covered && i < len(l.marks) {
		below := l.floor
		if i > 0 {
			below = l.marks[i-1].upTo
		}
		if held > below {
			l.marks[i].upTo = held
			keep++
		}
	}
	l.marks, l.acked = l.marks[:keep], held
	if !covered {
		l.floor = held
	}
	return minID, ok, covered
}

// idRuns is a set of attempt ids as ascending, disjoint runs that do not
// touch, at most maxAckedRuns of them; ids up to floor are not held.
type idRuns struct {
	runs  []idRun
	floor int64
}

// idRun is the ids lo..hi.
type idRun struct{ lo, hi int64 }

// add puts id in the set.
func (s *idRuns) add(id int64) {
	if id <= s.floor {
		return
	}
	n := len(s.runs)
	if n > 0 && s.runs[n-1].hi == id-1 {
		s.runs[n-1].hi = id // the usual case: the next id
		return
	}
	i := sort.Search(n, func(i int) bool { return s.runs[i].hi >= id-1 })
	if i < n && s.runs[i].lo <= id+1 {
		switch g := &s.runs[i]; {
		case id >= g.lo && id <= g.hi:
		case id == g.hi+1:
			g.hi = id
			if i+1 < n && s.runs[i+1].lo == id+1 {
				g.hi = s.runs[i+1].hi
				s.runs = slices.Delete(s.runs, i+1, i+2)
			}
		default: // id == g.lo-1
			g.lo = id
		}
		return
	}
	s.runs = slices.Insert(s.runs, i, idRun{lo: id, hi: id})
	if over := len(s.runs) - maxAckedRuns; over > 0 {
		s.floor = s.runs[over-1].hi
		s.runs = slices.Delete(s.runs, 0, over)
	}
}

// missing returns how many ids of the set in lo+1..hi are not in present
// (ascending), and the lowest and highest of them.
func (s *idRuns) missing(lo, hi int64, present []int64) (n, first, last int64) {
	i := sort.Search(len(s.runs), func(i int) bool { return s.runs[i].hi > lo })
	k := 0
	for ; i < len(s.runs) && s.runs[i].lo <= hi; i++ {
		a, b := max(s.runs[i].lo, lo+1), min(s.runs[i].hi, hi)
		for k < len(present) && present[k] < a {
			k++
		}
		for a <= b {
			end := b // a..end is missing
			if k < len(present) && present[k] <= b {
				end = present[k] - 1
			}
			if a <= end {
				if n == 0 {
					first = a
				}
				n += end - a + 1
				last = end
			}
			if end == b {
				break
			}
			a = present[k] + 1
			k++
		}
	}
	return n, first, last
}
