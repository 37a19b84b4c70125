package kinesis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/internal/ratelog"
)

var _ channel.DLQStorer = (*Channel)(nil)

// The dead-letter store of a broker is items of the lease table (stream names have no
// '#', so these groups are no lease's):
//
//	group "<stream>#dlq", shard "<trigger>": the trigger's counters. next is the last id
//	  given; n and b the entries and bytes (dlq.Entry.Size) held; ver is raised at each
//	  change of n or b.
//	group "<stream>#dlq#<trigger>", shard "<id>" (20 digits: the string order is the id
//	  order): an entry. t is when it was stored (Unix ns), sz its size, exp t plus
//	  --dlq-max-age in Unix seconds (for a TTL on the table), parts how many items hold
//	  it when more than one, v its dlq.Encode, or the first dlqPart bytes of it.
//	group "<stream>#dlq#<trigger>", shard "<id>.<k>": part k (1 to parts-1) of the v of
//	  a larger entry; written before the entry's first item, deleted after it.
//
// DynamoDB has no transaction here (dynalite has none): the counters are moved after
// the items, so a crash in between leaves them off by that entry. A store that finds
// them off (a listing that read the whole list, or an eviction that ran out of older
// entries) sets them to what the items hold.
const (
	attrDLQNext  = "next"
	attrDLQN     = "n"
	attrDLQBytes = "b"
	attrDLQVer   = "ver"
	attrDLQTime  = "t"
	attrDLQSize  = "sz"
	attrDLQExp   = "exp"
	attrDLQParts = "parts"
	attrDLQValue = "v"

	dlqGroupSuffix = "#dlq"
	// dlqPart is the most bytes of an entry one item holds: DynamoDB items are at most
	// 400 KB.
	dlqPart = 300 << 10
	// dlqPageBytes bounds the bytes of entries one List reads: a page stops after the
	// entry that reaches it (Next says where the following one starts).
	dlqPageBytes = 16 << 20
	// dlqScan is how many items one query of an eviction reads.
	dlqScan = 25
)

// DLQStore returns the broker's dead-letter store in the lease table
// (channel.DLQStorer): items of their own beside the leases (see above), so every
// replica sharing the table shares it and it outlives the processes. The bounds are
// kept with counters per trigger: a store evicts the oldest entries, on any replica,
// while the counters are past --dlq-max-entries or --dlq-max-bytes, and entries older
// than --dlq-max-age at each store and at each listing from the start; a listing never
// shows one. Every replica must run with the same limits. Without a lease table it
// returns an error wrapping channel.ErrNoDLQStore.
func (c *Channel) DLQStore(_ context.Context, lim dlq.Limits) (dlq.Store, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	if c.leases == nil {
		return nil, fmt.Errorf("kinesis without --kinesis-lease-table: %w", channel.ErrNoDLQStore)
	}
	return newDLQStore(c.leases, c.stream, lim, c.log), nil
}

func newDLQStore(t *leaseTable, stream string, lim dlq.Limits, log *ratelog.Logger) *dlqStore {
	return &dlqStore{t: t, stream: stream, lim: lim, log: log, now: time.Now, expired: make(map[string]int)}
}

// dlqStore is the dead-letter store of one broker in the lease table.
type dlqStore struct {
	t      *leaseTable
	stream string
	lim    dlq.Limits
	log    *ratelog.Logger
	now    func() time.Time

	mu       sync.Mutex
	expired  map[string]int       // per trigger: entries a listing found past the age, reported by the next Put
	recounts map[string]time.Time // per trigger: when this process last set its counters from its items
}

// recountEvery bounds how often a store sets a trigger's counters from its items before
// evicting an entry that is not past its age: items may vanish without their counter
// moving (DynamoDB's TTL, a process killed between a delete and its count), and counters
// that count too many would evict live dead letters.
const recountEvery = time.Minute

// countTimeout bounds a counter update that follows a write or delete already done: it
// runs even when the caller's context has ended, so that the counters follow the items.
const countTimeout = 10 * time.Second

// dlqMeta is a trigger's counters.
type dlqMeta struct {
	next uint64
	n, b int64
	ver  int64
}

// over reports whether m is past the count or bytes bound.
func (s *dlqStore) over(m dlqMeta) bool {
	return m.n > int64(s.lim.MaxEntries) || m.b > s.lim.MaxBytes
}

// dlqHead is what a store reads of an entry's first item to evict or delete it.
type dlqHead struct {
	id    uint64
	time  time.Time
	size  int64
	parts int
}

func (s *dlqStore) Durable() bool { return true }

func (s *dlqStore) errf(trigger string, err error) error {
	return fmt.Errorf("%w: kinesis: dead-letter store of %s in table %s: %w", channel.ErrUnavailable, trigger, s.t.name, err)
}

func (s *dlqStore) group(trigger string) string { return s.stream + dlqGroupSuffix + "#" + trigger }

func (s *dlqStore) metaKey(trigger string) map[string]types.AttributeValue {
	return s.t.key(s.stream+dlqGroupSuffix, trigger)
}

// dlqKey is the range key of entry id's first item.
func dlqKey(id uint64) string { return fmt.Sprintf("%020d", id) }

// dlqPartKey is the range key of part k of entry id.
func dlqPartKey(id uint64, k int) string { return dlqKey(id) + "." + strconv.Itoa(k) }

var errDLQKey = errors.New("not a dead-letter item's key")

// parseDLQKey reads a range key of dlqKey (part 0) or dlqPartKey.
func parseDLQKey(s string) (id uint64, part int, err error) {
	digits, p, dotted := strings.Cut(s, ".")
	if len(digits) != 20 {
		return 0, 0, fmt.Errorf("%w: %q", errDLQKey, s)
	}
	id, err = strconv.ParseUint(digits, 10, 64)
	if err != nil || id == 0 {
		return 0, 0, fmt.Errorf("%w: %q", errDLQKey, s)
	}
	if !dotted {
		return id, 0, nil
	}
	part, err = strconv.Atoi(p)
	if err != nil || part < 1 || strconv.Itoa(part) != p {
		return 0, 0, fmt.Errorf("%w: %q", errDLQKey, s)
	}
	return id, part, nil
}

// num reads a number attribute; 0 when it is missing or not an integer (counters that
// are wrong are set again from the items).
func num(item map[string]types.AttributeValue, name string) int64 {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

func decodeMeta(item map[string]types.AttributeValue) dlqMeta {
	return dlqMeta{next: uint64(max(num(item, attrDLQNext), 0)), n: num(item, attrDLQN), b: num(item, attrDLQBytes), ver: num(item, attrDLQVer)}
}

// decodeHead reads an entry's first item; ok false for a part or a foreign item.
func decodeHead(item map[string]types.AttributeValue) (dlqHead, bool) {
	k, _ := item[attrShard].(*types.AttributeValueMemberS)
	if k == nil {
		return dlqHead{}, false
	}
	id, part, err := parseDLQKey(k.Value)
	if err != nil || part != 0 {
		return dlqHead{}, false
	}
	return dlqHead{id: id, time: time.Unix(0, num(item, attrDLQTime)), size: num(item, attrDLQSize),
		parts: int(max(num(item, attrDLQParts), 1))}, true
}

// meta reads trigger's counters.
func (s *dlqStore) meta(ctx context.Context, trigger string) (dlqMeta, error) {
	out, err := s.t.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.t.name), Key: s.metaKey(trigger), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return dlqMeta{}, err
	}
	return decodeMeta(out.Item), nil
}

// count adds dn entries and db bytes to trigger's counters and returns them.
func (s *dlqStore) count(ctx context.Context, trigger string, dn, db int64) (dlqMeta, error) {
	out, err := s.t.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.t.name), Key: s.metaKey(trigger),
		UpdateExpression:         aws.String("ADD #n :n, #b :b, #v :one"),
		ExpressionAttributeNames: map[string]string{"#n": attrDLQN, "#b": attrDLQBytes, "#v": attrDLQVer},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":n":   &types.AttributeValueMemberN{Value: strconv.FormatInt(dn, 10)},
			":b":   &types.AttributeValueMemberN{Value: strconv.FormatInt(db, 10)},
			":one": &types.AttributeValueMemberN{Value: "1"}},
		ReturnValues: types.ReturnValueAllNew,
	})
	if err != nil {
		return dlqMeta{}, err
	}
	return decodeMeta(out.Attributes), nil
}

// reserve gives the next id of trigger.
func (s *dlqStore) reserve(ctx context.Context, trigger string) (uint64, error) {
	out, err := s.t.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.t.name), Key: s.metaKey(trigger),
		UpdateExpression:          aws.String("ADD #x :one"),
		ExpressionAttributeNames:  map[string]string{"#x": attrDLQNext},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
		ReturnValues:              types.ReturnValueUpdatedNew,
	})
	if err != nil {
		return 0, err
	}
	id := decodeMeta(out.Attributes).next
	if id == 0 {
		return 0, fmt.Errorf("counter %s of %s is not a positive integer", attrDLQNext, trigger)
	}
	return id, nil
}

// Put stores e. The evictions it reports are the entries of trigger it deleted to stay
// within the bounds (those another replica's Put deleted first are that one's), and
// those this process's List found past the age since its last Put.
func (s *dlqStore) Put(ctx context.Context, trigger string, e dlq.Entry) (int, error) {
	size := e.Size()
	if size > s.lim.MaxBytes {
		return 0, fmt.Errorf("kinesis: dead-letter store of %s: a dead letter of %d bytes is larger than --dlq-max-bytes %d", trigger, size, s.lim.MaxBytes)
	}
	id, err := s.reserve(ctx, trigger)
	if err != nil {
		return 0, s.errf(trigger, err)
	}
	e.Time = s.now().Round(0).UTC()
	if err := s.write(ctx, trigger, id, &e, size); err != nil {
		return 0, s.errf(trigger, err)
	}
	m, err := s.countAfter(ctx, trigger, 1, size)
	if err != nil { // stored; the counters are off by it until a store or listing sets them again
		s.log.Warn("dlq-count", "kinesis: dead-letter store: a dead letter was stored but not counted", "trigger", trigger, "err", err)
		return 0, nil
	}
	n, err := s.evict(ctx, trigger, id, m)
	if err != nil { // stored; what is past the bounds is evicted by the next store
		s.log.Warn("dlq-evict", "kinesis: dead-letter store: evicting to make room failed", "trigger", trigger, "err", err)
	}
	s.mu.Lock()
	n += s.expired[trigger]
	delete(s.expired, trigger)
	s.mu.Unlock()
	return n, nil
}

// write writes entry e as id: its parts, then its first item. A failure deletes the
// parts written.
func (s *dlqStore) write(ctx context.Context, trigger string, id uint64, e *dlq.Entry, size int64) error {
	v := dlq.Encode(e)
	parts := max(1, (len(v)+dlqPart-1)/dlqPart)
	exp := &types.AttributeValueMemberN{Value: strconv.FormatInt(e.Time.Add(s.lim.MaxAge).Unix()+1, 10)}
	group := s.group(trigger)
	put := func(shard string, item map[string]types.AttributeValue) error {
		for k, v := range s.t.key(group, shard) {
			item[k] = v
		}
		item[attrDLQExp] = exp
		_, err := s.t.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.t.name), Item: item})
		return err
	}
	var written []string
	for k := parts - 1; k >= 1; k-- {
		key := dlqPartKey(id, k)
		if err := put(key, map[string]types.AttributeValue{attrDLQValue: &types.AttributeValueMemberB{Value: v[k*dlqPart : min(len(v), (k+1)*dlqPart)]}}); err != nil {
			s.deleteKeys(context.WithoutCancel(ctx), group, written)
			return err
		}
		written = append(written, key)
	}
	head := map[string]types.AttributeValue{
		attrDLQTime:  &types.AttributeValueMemberN{Value: strconv.FormatInt(e.Time.UnixNano(), 10)},
		attrDLQSize:  &types.AttributeValueMemberN{Value: strconv.FormatInt(size, 10)},
		attrDLQValue: &types.AttributeValueMemberB{Value: v[:min(len(v), dlqPart)]},
	}
	if parts > 1 {
		head[attrDLQParts] = &types.AttributeValueMemberN{Value: strconv.Itoa(parts)}
	}
	if err := put(dlqKey(id), head); err != nil {
		s.deleteKeys(context.WithoutCancel(ctx), group, written)
		return err
	}
	return nil
}

// deleteKeys deletes the items of group with these range keys, 25 a call, trying the
// unprocessed ones again while ctx lasts.
func (s *dlqStore) deleteKeys(ctx context.Context, group string, keys []string) error {
	for len(keys) > 0 {
		n := min(len(keys), 25)
		reqs := make([]types.WriteRequest, n)
		for i, k := range keys[:n] {
			reqs[i] = types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: s.t.key(group, k)}}
		}
		keys = keys[n:]
		for wait := 50 * time.Millisecond; len(reqs) > 0; wait = min(2*wait, time.Second) {
			out, err := s.t.api.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{s.t.name: reqs}})
			if err != nil {
				return err
			}
			reqs = out.UnprocessedItems[s.t.name]
			if len(reqs) == 0 {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
	}
	return nil
}

// heads reads up to dlqScan items of trigger from start (nil: the first) and returns the
// entries' first items among them, and where the next read starts (nil: at the end).
func (s *dlqStore) heads(ctx context.Context, trigger string, start map[string]types.AttributeValue) ([]dlqHead, map[string]types.AttributeValue, error) {
	out, err := s.t.api.Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(s.t.name),
		KeyConditionExpression:    aws.String("#g = :g"),
		ProjectionExpression:      aws.String("#s, #t, #z, #p"),
		ExpressionAttributeNames:  map[string]string{"#g": attrGroup, "#s": attrShard, "#t": attrDLQTime, "#z": attrDLQSize, "#p": attrDLQParts},
		ExpressionAttributeValues: map[string]types.AttributeValue{":g": &types.AttributeValueMemberS{Value: s.group(trigger)}},
		ConsistentRead:            aws.Bool(true),
		Limit:                     aws.Int32(dlqScan),
		ExclusiveStartKey:         start,
	})
	if err != nil {
		return nil, nil, err
	}
	var hs []dlqHead
	for _, item := range out.Items {
		if h, ok := decodeHead(item); ok {
			hs = append(hs, h)
		}
	}
	if len(out.LastEvaluatedKey) == 0 {
		return hs, nil, nil
	}
	return hs, out.LastEvaluatedKey, nil
}

// evict deletes trigger's entries older than entry own, oldest first, while m (the
// counters, as the last change left them) is past a bound or the oldest is past the
// age, and returns how many it deleted. Running out of older entries while m counts
// more than own means the counters may hold more than the items: they are set again.
func (s *dlqStore) evict(ctx context.Context, trigger string, own uint64, m dlqMeta) (int, error) {
	cut := s.now().Add(-s.lim.MaxAge)
	n := 0
	var start map[string]types.AttributeValue
	for {
		hs, next, err := s.heads(ctx, trigger, start)
		if err != nil {
			return n, err
		}
		for _, h := range hs {
			if h.id >= own {
				next = nil
				break
			}
			if !s.over(m) && !h.time.Before(cut) {
				return n, nil
			}
			if !h.time.Before(cut) && s.recountDue(trigger) {
				// About to evict a live dead letter for the bounds: first make sure the
				// counters count what the items hold.
				if err := s.recount(ctx, trigger); err != nil {
					return n, err
				}
				if m, err = s.meta(ctx, trigger); err != nil {
					return n, err
				}
				if !s.over(m) {
					return n, nil
				}
			}
			dropped, nm, err := s.drop(ctx, trigger, h)
			if err != nil {
				return n, err
			}
			if dropped {
				n++
				m = nm
			} else if m, err = s.meta(ctx, trigger); err != nil { // another store took it
				return n, err
			}
		}
		if next == nil {
			break
		}
		start = next
	}
	// No older entry is left: the counters should hold own alone (or nothing, without
	// own), or a few more stored meanwhile.
	want := int64(1)
	if own == math.MaxUint64 {
		want = 0
	}
	if s.over(m) || m.n > want {
		return n, s.recount(ctx, trigger)
	}
	return n, nil
}

// drop deletes entry h, if it is still there (false otherwise), and returns the
// counters after.
func (s *dlqStore) drop(ctx context.Context, trigger string, h dlqHead) (bool, dlqMeta, error) {
	group := s.group(trigger)
	_, err := s.t.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.t.name), Key: s.t.key(group, dlqKey(h.id)),
		ConditionExpression:      aws.String("attribute_exists(#s)"),
		ExpressionAttributeNames: map[string]string{"#s": attrShard},
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return false, dlqMeta{}, nil
	}
	if err != nil {
		return false, dlqMeta{}, err
	}
	var parts []string
	for k := 1; k < h.parts; k++ {
		parts = append(parts, dlqPartKey(h.id, k))
	}
	if err := s.deleteKeys(ctx, group, parts); err != nil {
		s.log.Warn("dlq-parts", "kinesis: dead-letter store: parts of a deleted dead letter left in the table", "trigger", trigger, "id", h.id, "err", err)
	}
	m, err := s.countAfter(ctx, trigger, -1, -h.size)
	return true, m, err
}

// countAfter is count for a change already made to the items: it runs, within
// countTimeout, even if ctx has ended.
func (s *dlqStore) countAfter(ctx context.Context, trigger string, dn, db int64) (dlqMeta, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), countTimeout)
	defer cancel()
	return s.count(ctx, trigger, dn, db)
}

// recountDue reports whether trigger's counters were not set from its items by this
// process within recountEvery, and if so records that they are now.
func (s *dlqStore) recountDue(trigger string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if at, ok := s.recounts[trigger]; ok && s.now().Sub(at) < recountEvery {
		return false
	}
	if s.recounts == nil {
		s.recounts = map[string]time.Time{}
	}
	s.recounts[trigger] = s.now()
	return true
}

// recount sets trigger's counters to what its items hold, unless they changed since it
// read them (another store moves them; the next recount sets them).
func (s *dlqStore) recount(ctx context.Context, trigger string) error {
	m, err := s.meta(ctx, trigger)
	if err != nil {
		return err
	}
	var n, b int64
	var start map[string]types.AttributeValue
	for {
		hs, next, err := s.heads(ctx, trigger, start)
		if err != nil {
			return err
		}
		for _, h := range hs {
			n++
			b += h.size
		}
		if next == nil {
			break
		}
		start = next
	}
	return s.setCounts(ctx, trigger, m, n, b)
}

// setCounts sets trigger's counters to n and b if they are still m.
func (s *dlqStore) setCounts(ctx context.Context, trigger string, m dlqMeta, n, b int64) error {
	if m.n == n && m.b == b {
		return nil
	}
	values := map[string]types.AttributeValue{
		":n":   &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)},
		":b":   &types.AttributeValueMemberN{Value: strconv.FormatInt(b, 10)},
		":one": &types.AttributeValueMemberN{Value: "1"},
	}
	cond := "attribute_not_exists(#v)"
	if m.ver != 0 {
		cond = "#v = :v"
		values[":v"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(m.ver, 10)}
	}
	_, err := s.t.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.t.name), Key: s.metaKey(trigger),
		UpdateExpression:          aws.String("SET #n = :n, #b = :b ADD #v :one"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  map[string]string{"#n": attrDLQN, "#b": attrDLQBytes, "#v": attrDLQVer},
		ExpressionAttributeValues: values,
	})
	var failed *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &failed) {
		return err
	}
	return nil
}

// List returns a page of trigger's entries above after: at most limit, and no more
// once dlqPageBytes are read. A listing from the start first deletes the entries past
// the age (reported by the next Put); none is ever listed. Total and Bytes are the
// counters, or what the items hold when the page read them all (the counters are set to
// it if they differ).
func (s *dlqStore) List(ctx context.Context, trigger string, after uint64, limit int) (dlq.Page, error) {
	limit = dlq.ClampPage(limit)
	if after == 0 {
		n, err := s.evict(ctx, trigger, math.MaxUint64, dlqMeta{})
		if n > 0 {
			s.mu.Lock()
			s.expired[trigger] += n
			s.mu.Unlock()
		}
		if err != nil {
			return dlq.Page{}, s.errf(trigger, err)
		}
	}
	m, err := s.meta(ctx, trigger)
	if err != nil {
		return dlq.Page{}, s.errf(trigger, err)
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.t.name),
		KeyConditionExpression:    aws.String("#g = :g"),
		ExpressionAttributeNames:  map[string]string{"#g": attrGroup},
		ExpressionAttributeValues: map[string]types.AttributeValue{":g": &types.AttributeValueMemberS{Value: s.group(trigger)}},
		ConsistentRead:            aws.Bool(true),
		Limit:                     aws.Int32(int32(limit + 1)),
	}
	if after > 0 { // above after's key and its parts' ("/" sorts after ".", before digits)
		in.KeyConditionExpression = aws.String("#g = :g AND #s > :a")
		in.ExpressionAttributeNames["#s"] = attrShard
		in.ExpressionAttributeValues[":a"] = &types.AttributeValueMemberS{Value: dlqKey(after) + "/"}
	}
	cut := s.now().Add(-s.lim.MaxAge)
	var (
		p     dlq.Page
		cur   *dlqReading
		heads int64 // entries read, listed or not
		bytes int64 // their sizes
		read  int64 // bytes of the entries listed
		last  uint64
		end   bool
	)
	finish := func() {
		if cur == nil {
			return
		}
		e, ok := cur.entry(s, trigger, cut)
		cur = nil
		if ok {
			p.Entries = append(p.Entries, e)
			read += e.Size()
		}
	}
pages:
	for {
		out, err := s.t.api.Query(ctx, in)
		if err != nil {
			return dlq.Page{}, s.errf(trigger, err)
		}
		for _, item := range out.Items {
			k, _ := item[attrShard].(*types.AttributeValueMemberS)
			if k == nil {
				continue
			}
			id, part, err := parseDLQKey(k.Value)
			if err != nil {
				continue
			}
			if part > 0 {
				if cur != nil && cur.head.id == id && part < len(cur.parts) {
					cur.parts[part] = value(item)
				}
				continue
			}
			finish()
			if len(p.Entries) >= limit || read >= dlqPageBytes {
				p.Next = last
				break pages
			}
			h, _ := decodeHead(item)
			if h.time.Before(cut) {
				continue
			}
			cur = &dlqReading{head: h, parts: make([][]byte, h.parts)}
			cur.parts[0] = value(item)
			heads++
			bytes += h.size
			last = h.id
		}
		if len(out.LastEvaluatedKey) == 0 {
			finish()
			end = true
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	switch {
	case end && after == 0:
		p.Total, p.Bytes, p.Last = int(heads), bytes, last
		if err := s.setCounts(ctx, trigger, m, heads, bytes); err != nil {
			s.log.Warn("dlq-count", "kinesis: dead-letter store: cannot set the counters again", "trigger", trigger, "err", err)
		}
	default:
		p.Total, p.Bytes = max(int(m.n), len(p.Entries)), max(m.b, 0)
		if p.Total > 0 { // the last id given: one deleted since may have had it
			p.Last = max(m.next, last)
		}
	}
	return p, nil
}

func value(item map[string]types.AttributeValue) []byte {
	v, _ := item[attrDLQValue].(*types.AttributeValueMemberB)
	if v == nil {
		return nil
	}
	return v.Value
}

// dlqReading is an entry whose items a List is reading.
type dlqReading struct {
	head  dlqHead
	parts [][]byte
}

// entry decodes the entry read; false when a part is missing (deleted while read) or
// it cannot be decoded (logged).
func (r *dlqReading) entry(s *dlqStore, trigger string, cut time.Time) (dlq.Entry, bool) {
	var v []byte
	for _, p := range r.parts {
		if p == nil {
			return dlq.Entry{}, false
		}
		v = append(v, p...)
	}
	e, err := dlq.Decode(v)
	if err != nil {
		s.log.Warn("dlq-decode", "kinesis: dead-letter store: unreadable entry skipped", "trigger", trigger, "id", r.head.id, "err", err)
		return dlq.Entry{}, false
	}
	e.ID = r.head.id
	if e.Time.IsZero() {
		e.Time = r.head.time.UTC()
	}
	return e, !e.Time.Before(cut)
}

// Delete removes entry id.
func (s *dlqStore) Delete(ctx context.Context, trigger string, id uint64) error {
	out, err := s.t.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.t.name), Key: s.t.key(s.group(trigger), dlqKey(id)), ConsistentRead: aws.Bool(true),
		ProjectionExpression:     aws.String("#s, #t, #z, #p"),
		ExpressionAttributeNames: map[string]string{"#s": attrShard, "#t": attrDLQTime, "#z": attrDLQSize, "#p": attrDLQParts},
	})
	if err != nil {
		return s.errf(trigger, err)
	}
	h, ok := decodeHead(out.Item)
	if !ok {
		return fmt.Errorf("kinesis: dead-letter store of %s: %w: %d", trigger, dlq.ErrNotFound, id)
	}
	dropped, _, err := s.drop(ctx, trigger, h)
	switch {
	case err != nil:
		return s.errf(trigger, err)
	case !dropped:
		return fmt.Errorf("kinesis: dead-letter store of %s: %w: %d", trigger, dlq.ErrNotFound, id)
	}
	return nil
}

// Purge removes every entry of trigger and returns how many it found.
func (s *dlqStore) Purge(ctx context.Context, trigger string) (int, error) {
	group := s.group(trigger)
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.t.name),
		KeyConditionExpression:    aws.String("#g = :g"),
		ProjectionExpression:      aws.String("#s"),
		ExpressionAttributeNames:  map[string]string{"#g": attrGroup, "#s": attrShard},
		ExpressionAttributeValues: map[string]types.AttributeValue{":g": &types.AttributeValueMemberS{Value: group}},
		ConsistentRead:            aws.Bool(true),
	}
	n := 0
	for {
		out, err := s.t.api.Query(ctx, in)
		if err != nil {
			return n, s.errf(trigger, err)
		}
		keys := make([]string, 0, len(out.Items))
		for _, item := range out.Items {
			if k, ok := item[attrShard].(*types.AttributeValueMemberS); ok {
				keys = append(keys, k.Value)
				if _, part, err := parseDLQKey(k.Value); err == nil && part == 0 {
					n++
				}
			}
		}
		if err := s.deleteKeys(ctx, group, keys); err != nil {
			return n, s.errf(trigger, err)
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	if err := s.recount(ctx, trigger); err != nil {
		return n, s.errf(trigger, err)
	}
	return n, nil
}
