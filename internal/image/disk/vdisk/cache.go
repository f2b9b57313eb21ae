package vdisk

import (
	"container/list"
	"sync"
)

// lru is a small, bounded, concurrency-safe cache of decoded tables or
// decompressed blocks, keyed by their offset in the container.
type lru[V any] struct {
	mu    sync.Mutex
	max   int
	ll    *list.List
	items map[int64]*list.Element
}

type lruEntry[V any] struct {
	key int64
	val V
}

func newLRU[V any](max int) *lru[V] {
	return &lru[V]{max: max, ll: list.New(), items: make(map[int64]*list.Element)}
}

func (c *lru[V]) get(key int64) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		c.ll.MoveToFront(e)
		return e.Value.(*lruEntry[V]).val, true
	}
	var zero V
	return zero, false
}

func (c *lru[V]) put(key int64, val V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		e.Value.(*lruEntry[V]).val = val
		c.ll.MoveToFront(e)
		return
	}
	c.items[key] = c.ll.PushFront(&lruEntry[V]{key, val})
	for c.ll.Len() > c.max {
		e := c.ll.Back()
		c.ll.Remove(e)
		delete(c.items, e.Value.(*lruEntry[V]).key)
	}
}

// len is the number of cached values.
func (c *lru[V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}
