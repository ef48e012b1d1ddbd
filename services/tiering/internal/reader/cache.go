package reader

import (
	"container/list"
	"sync"
)

// blockCache is an LRU of object byte ranges bounded by total bytes. Safe
// for concurrent use.
type blockCache struct {
	mu    sync.Mutex
	limit int64
	size  int64
	ll    *list.List // front is most recent
	items map[blockKey]*list.Element
}

type blockKey struct {
	key   string
	index int64
}

type blockEntry struct {
	k    blockKey
	data []byte
}

func newBlockCache(limit int64) *blockCache {
	return &blockCache{limit: limit, ll: list.New(), items: map[blockKey]*list.Element{}}
}

func (c *blockCache) get(k blockKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		c.ll.MoveToFront(el)
		return el.Value.(*blockEntry).data, true
	}
	return nil, false
}

func (c *blockCache) put(k blockKey, data []byte) {
	if int64(len(data)) > c.limit {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		c.ll.MoveToFront(el)
		return
	}
	c.items[k] = c.ll.PushFront(&blockEntry{k: k, data: data})
	c.size += int64(len(data))
	for c.size > c.limit {
		el := c.ll.Back()
		e := el.Value.(*blockEntry)
		c.ll.Remove(el)
		delete(c.items, e.k)
		c.size -= int64(len(e.data))
	}
}

func (c *blockCache) bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}
