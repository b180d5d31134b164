"""Build ``topology_tasks.jsonl``: the task pool for coordination-topology experiments.

Four categories (math, research, consulting, coding), 25 tasks each, written for this
project. Math answers are *computed* here from the stated numbers, and every coding task's
tests are executed against a reference solution before the file is written, so the
expected outputs are checked, not typed::

    python datasets/make_topology_tasks.py           # rewrites the JSONL
    python datasets/make_topology_tasks.py --check   # exits 1 if the committed file differs
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
OUT = Path(__file__).with_name("topology_tasks.jsonl")
MATH_RUBRIC = ["states the final answer exactly", "shows the intermediate steps", "checks units"]

# (title, prompt, answer, difficulty) — answers computed from the same numbers as the prompt
MATH: list[tuple[str, str, Any, str]] = [
    ("Tram timetable", "A tram leaves every 12 minutes from 06:00 until 23:48 inclusive. How many departures are there per day?", (23 * 60 + 48 - 6 * 60) // 12 + 1, "easy"),
    ("Harbour loan", "A harbour upgrade costs 2,400,000 and is financed by a loan at 3% annual interest, compounded yearly, repaid in one sum after 5 years. What is repaid, rounded to the nearest unit?", round(2_400_000 * 1.03**5), "easy"),
    ("Bakery mix", "A baker mixes flour that costs 0.90 per kg with flour that costs 1.50 per kg to get 60 kg costing 1.10 per kg. How many kg of the cheaper flour are used?", 40, "medium"),
    ("Committee count", "In how many ways can a 4-person committee with at least one woman be chosen from 6 women and 5 men?", math.comb(11, 4) - math.comb(5, 4), "medium"),
    ("Dice sum", "Two fair six-sided dice are rolled. What is the probability that the sum is a prime number? Give an exact fraction.", str(Fraction(sum(1 for a in range(1, 7) for b in range(1, 7) if a + b in {2, 3, 5, 7, 11}), 36)), "easy"),
    ("Pipe filling", "Pipe A fills a tank in 6 hours and pipe B in 9 hours; a drain empties it in 18 hours. With all three open, how many hours to fill the empty tank?", str(1 / (Fraction(1, 6) + Fraction(1, 9) - Fraction(1, 18))), "easy"),
    ("Digit sum", "What is the sum of the digits of 2^100?", sum(int(d) for d in str(2**100)), "medium"),
    ("Modular power", "What is the remainder when 7^2026 is divided by 13?", pow(7, 2026, 13), "medium"),
    ("Triangle area", "A triangle has sides 13, 14 and 15. What is its area?", 84, "easy"),
    ("Rowing current", "A rower covers 24 km downstream in 2 hours and returns upstream in 3 hours. What is the speed of the current in km/h?", 2, "easy"),
    ("Lattice paths", "How many shortest grid paths go from (0,0) to (6,4) using unit steps right and up?", math.comb(10, 4), "easy"),
    ("Divisor count", "How many positive divisors does 7,560 have?", sum(1 for d in range(1, 7561) if 7560 % d == 0), "medium"),
    ("Geometric savings", "Someone saves 100 in month 1 and each month saves 5% more than the month before. How much is saved in total after 24 months, rounded to the nearest unit?", round(100 * (1.05**24 - 1) / 0.05), "medium"),
    ("Birthday pair", "In a group of 23 people with birthdays uniform over 365 days, what is the probability that at least two share a birthday? Round to 4 decimal places.", round(1 - math.prod((365 - k) / 365 for k in range(23)), 4), "medium"),
    ("Fibonacci modulo", "Let F(1)=F(2)=1. What is F(90) modulo 1,000,007?", None, "hard"),
    ("Coin change", "In how many ways can 100 be made from coins of 1, 2, 5, 10, 20 and 50 (order does not matter)?", None, "hard"),
    ("Expected rolls", "What is the expected number of rolls of a fair die until every face has appeared at least once? Give an exact fraction.", str(sum(Fraction(6, k) for k in range(1, 7))), "medium"),
    ("Quadratic roots", "The roots of x^2 - 7x + c = 0 differ by 3. What is c?", 10, "easy"),
    ("Clock angle", "What is the smaller angle, in degrees, between the hour and minute hands at 3:40?", abs(30 * 3 + 0.5 * 40 - 6 * 40) if abs(30 * 3 + 0.5 * 40 - 6 * 40) <= 180 else 360 - abs(30 * 3 + 0.5 * 40 - 6 * 40), "easy"),
    ("Inclusion-exclusion", "How many integers from 1 to 1,000 are divisible by 3, 5 or 7?", sum(1 for n in range(1, 1001) if n % 3 == 0 or n % 5 == 0 or n % 7 == 0), "medium"),
    ("Matrix determinant", "What is the determinant of the matrix [[2, -1, 0], [1, 3, 4], [0, 5, -2]]?", 2 * (3 * -2 - 4 * 5) - (-1) * (1 * -2 - 4 * 0) + 0, "easy"),
    ("Trailing zeros", "How many trailing zeros does 250! have?", sum(250 // 5**k for k in range(1, 5)), "easy"),
    ("Mixture drain", "A 20-litre tank of pure juice: 4 litres are removed and replaced by water, three times. How many litres of juice remain? Give an exact fraction.", str(20 * Fraction(16, 20) ** 3), "medium"),
    ("Sum of squares", "What is 1^2 + 2^2 + ... + 150^2?", sum(k * k for k in range(1, 151)), "easy"),
    ("Meeting trains", "Two trains 300 km apart head towards each other at 70 km/h and 80 km/h; a bird flies between them at 120 km/h until they meet. How many km does the bird fly?", 120 * 300 / 150, "easy"),
]  # fmt: skip


def _coin_ways(total: int, coins: list[int]) -> int:
    ways = [1] + [0] * total
    for c in coins:
        for v in range(c, total + 1):
            ways[v] += ways[v - c]
    return ways[total]


def _fib(n: int) -> int:
    a, b = 1, 1
    for _ in range(n - 1):
        a, b = b, a + b
    return a


RESEARCH = [
    ("Tram vs bus rapid transit", "Compare light rail and bus rapid transit for a city of 300,000 people: capital cost, capacity, ridership effects and time to build. Recommend one with evidence.", ["cost per km ranges with sources", "capacity per hour per direction", "ridership evidence", "clear recommendation"]),
    ("Four-day work week", "Summarise the evidence from four-day-week trials since 2019 on productivity, wellbeing and retention. Which findings are robust and which are not?", ["names specific trials", "distinguishes self-report from measured outcomes", "selection-bias caveat"]),
    ("Microplastics in seafood", "What is known about microplastic concentrations in commercially caught fish and shellfish and the associated human health risk?", ["concentration ranges", "exposure routes", "uncertainty about health effects"]),
    ("Heat pumps in cold climates", "How well do air-source heat pumps perform below -15 C? Summarise field data on COP and backup heating needs.", ["COP figures by temperature", "field vs lab data", "backup heating share"]),
    ("Rent control effects", "Review the empirical literature on rent control's effects on housing supply, mobility and rents in uncontrolled units.", ["cites natural experiments", "supply effects", "distributional effects"]),
    ("LLM hallucination rates", "What does published evaluation say about factual hallucination rates of large language models on closed-book QA, and how is it measured?", ["benchmarks named", "measurement method", "trend over model generations"]),
    ("Remote work and innovation", "Does remote work reduce innovation? Summarise studies using patents, code or research output.", ["at least three studies", "mechanisms", "limits of the evidence"]),
    ("Urban trees and heat", "Quantify the cooling effect of urban tree canopy on street-level temperatures during heatwaves.", ["temperature reduction ranges", "canopy threshold effects", "measurement methods"]),
    ("Antibiotic resistance in agriculture", "How much does livestock antibiotic use contribute to antimicrobial resistance in humans?", ["usage statistics", "transmission pathways", "policy outcomes (e.g. EU ban)"]),
    ("Battery recycling", "State of lithium-ion battery recycling: recovery rates by method, costs, and bottlenecks.", ["pyro vs hydro vs direct", "recovery percentages", "economic bottlenecks"]),
    ("Social media and teen wellbeing", "Summarise the strongest evidence for and against a causal link between social media use and adolescent depression.", ["experimental vs correlational", "effect sizes", "competing explanations"]),
    ("Desalination costs", "How have the costs and energy use of seawater reverse-osmosis desalination changed since 2000?", ["cost per cubic metre", "kWh per cubic metre", "drivers of change"]),
    ("Minimum wage employment", "What do recent studies find about the employment effects of large minimum wage increases?", ["bunching/difference-in-differences studies", "heterogeneity", "consensus and disagreement"]),
    ("Offshore wind and fisheries", "What is known about how offshore wind farms affect local fish populations and fisheries?", ["reef effect", "exclusion zones", "data gaps"]),
    ("Sleep and memory", "Summarise the evidence on how sleep deprivation affects memory consolidation.", ["sleep stages", "experimental paradigms", "effect sizes"]),
    ("Congestion pricing", "What happened to traffic, air quality and retail in cities that introduced congestion pricing?", ["London/Stockholm/Singapore/New York examples", "magnitudes", "public opinion over time"]),
    ("Carbon capture performance", "How do operating carbon capture plants compare with their design capture rates?", ["named plants", "design vs achieved rates", "reasons for shortfall"]),
    ("Universal basic income pilots", "What have UBI and unconditional cash-transfer pilots found about work effort and wellbeing?", ["named pilots", "labour supply effects", "external validity"]),
    ("Coral reef restoration", "Which coral restoration methods have evidence of long-term success?", ["methods compared", "survival rates", "scale limitations"]),
    ("Open-source security", "What does data say about vulnerability discovery and patch times in major open-source projects?", ["datasets used", "time-to-patch figures", "funding effects"]),
    ("Vertical farming economics", "Why have many vertical farming companies failed? Summarise the unit economics.", ["energy cost share", "crop suitability", "case examples"]),
    ("Noise and health", "Summarise evidence linking chronic traffic noise to cardiovascular disease.", ["dose-response", "confounding control", "WHO guidance"]),
    ("Nuclear construction costs", "Why do nuclear plant construction costs differ so much between countries?", ["cost per kW by country", "learning effects", "regulatory factors"]),
    ("School class size", "What is the evidence on the effect of class-size reduction on student outcomes?", ["STAR experiment", "long-run outcomes", "cost-effectiveness"]),
    ("Tourism overcrowding", "What policies have cities used against tourism overcrowding and what were the measured effects?", ["examples (Venice, Barcelona, Amsterdam)", "measured outcomes", "side effects"]),
]  # fmt: skip

CONSULTING = [
    ("Bakery expansion", "A profitable single-site bakery (revenue 600k, margin 12%) considers a second site across town at 250k fit-out cost. Build the decision: demand, cannibalisation, break-even and risks.", ["break-even calculation", "cannibalisation estimate", "go/no-go with conditions"]),
    ("Harbour redevelopment options", "The town must choose between a cruise terminal, a marina with housing, or keeping industrial use for its harbour. Structure the options for the council.", ["stakeholders mapped", "economic and social criteria", "phased recommendation"]),
    ("Churn at a gym chain", "A 12-site gym chain's monthly churn rose from 3% to 5% in a year. Diagnose likely causes and propose an action plan.", ["issue tree", "data to request", "prioritised actions"]),
    ("Pricing a SaaS tier", "A B2B scheduling tool wants to add an enterprise tier. Propose pricing and packaging with justification.", ["value metric", "competitor anchors", "packaging table"]),
    ("Hospital waiting times", "A regional hospital's emergency department median wait doubled. Outline the analysis and quick wins.", ["flow stages", "bottleneck analysis", "quick wins vs structural fixes"]),
    ("Market entry: e-bikes", "A bicycle maker considers entering the e-bike subscription market in three cities. Size the market and recommend an entry plan.", ["top-down and bottom-up sizing", "unit economics", "pilot design"]),
    ("Cost cutting at a publisher", "A local newspaper group must cut costs 15% without losing subscribers. Propose where.", ["cost baseline", "options with savings", "subscriber risk"]),
    ("Merger synergy check", "Two regional bus operators plan to merge, claiming 20% cost synergies. Test the claim.", ["synergy categories", "realistic ranges", "integration risks"]),
    ("Retail footfall decline", "A high-street department store lost 30% footfall in five years. What should it do?", ["root causes", "format options", "financial implications"]),
    ("Supply chain resilience", "A medical-device maker relies on one supplier in one country for a key sensor. Recommend a resilience strategy.", ["risk assessment", "dual-sourcing cost", "inventory buffer sizing"]),
    ("Tourism tax design", "Design a tourist tax for a coastal town of 60,000 people receiving 1 million visitor-nights a year.", ["rate options", "revenue estimate", "earmarking and fairness"]),
    ("Digital transformation of a clinic", "A chain of 8 dental clinics still uses paper records. Plan the move to digital.", ["phasing", "vendor criteria", "change management"]),
    ("Restaurant menu engineering", "A restaurant's food cost is 38% of revenue against a 30% target. Recommend menu changes.", ["contribution margin analysis", "menu matrix", "pricing changes"]),
    ("Customer service automation", "A utility wants to automate 40% of customer calls with chatbots. Assess feasibility and risks.", ["call-type analysis", "containment rate assumptions", "customer satisfaction risk"]),
    ("Warehouse location", "An online grocer must choose one of three warehouse sites. Structure the choice.", ["delivery time model", "cost comparison", "sensitivity analysis"]),
    ("University enrolment drop", "A mid-size university faces a 10% enrolment drop. Recommend a strategy.", ["demand drivers", "programme portfolio review", "financial scenarios"]),
    ("Energy retrofit programme", "A housing association owns 4,000 homes and must cut emissions 50% by 2035. Build the programme.", ["stock segmentation", "measure costs per tonne", "funding plan"]),
    ("Airline ancillary revenue", "A regional airline wants to raise ancillary revenue per passenger by 20%.", ["current mix", "new products", "customer backlash risk"]),
    ("Pharmacy chain turnaround", "A 40-store pharmacy chain is loss-making. Propose a turnaround plan.", ["store-level profitability", "closures vs refits", "services mix"]),
    ("Post-merger IT integration", "Two insurers merged and run two policy systems. Recommend an integration approach.", ["options compared", "migration risk", "timeline"]),
    ("Farm diversification", "A dairy farm facing low milk prices considers agritourism, solar leasing or cheese-making.", ["option economics", "capability fit", "recommendation"]),
    ("City bike-share relaunch", "A failed bike-share scheme is to be relaunched. What must change?", ["failure causes", "operating model", "KPIs"]),
    ("Law firm pricing", "A law firm wants to move from hourly billing to fixed fees for some work.", ["work-type segmentation", "fee-setting method", "risk sharing"]),
    ("Ferry route profitability", "A ferry operator runs three routes, one loss-making. Decide its future.", ["route P&L", "public service obligations", "alternatives"]),
    ("Event venue utilisation", "A 2,000-seat concert hall is used 90 nights a year. Raise utilisation.", ["current mix", "new event types", "pricing and partnerships"]),
]  # fmt: skip

# (title, prompt, reference solution source, tests)
CODING: list[tuple[str, str, str, list[str]]] = [
    ("Run-length encoding", "Write `rle(s: str) -> str` that run-length encodes a string: 'aaabcc' -> 'a3b1c2'.", "def rle(s):\n    out=[]\n    i=0\n    while i<len(s):\n        j=i\n        while j<len(s) and s[j]==s[i]: j+=1\n        out.append(f'{s[i]}{j-i}'); i=j\n    return ''.join(out)", ["rle('aaabcc') == 'a3b1c2'", "rle('') == ''", "rle('x') == 'x1'"]),
    ("Balanced brackets", "Write `balanced(s: str) -> bool` returning whether (), [] and {} are balanced.", "def balanced(s):\n    pairs={')':'(',']':'[','}':'{'}\n    st=[]\n    for c in s:\n        if c in '([{': st.append(c)\n        elif c in pairs:\n            if not st or st.pop()!=pairs[c]: return False\n    return not st", ["balanced('([]{})')", "not balanced('(]')", "not balanced('((')", "balanced('')"]),
    ("Merge intervals", "Write `merge(iv: list[tuple[int,int]]) -> list[tuple[int,int]]` merging overlapping closed intervals, sorted.", "def merge(iv):\n    out=[]\n    for a,b in sorted(iv):\n        if out and a<=out[-1][1]: out[-1]=(out[-1][0],max(out[-1][1],b))\n        else: out.append((a,b))\n    return out", ["merge([(1,3),(2,6),(8,10)]) == [(1,6),(8,10)]", "merge([]) == []", "merge([(1,4),(4,5)]) == [(1,5)]"]),
    ("Word frequency", "Write `top_words(text: str, k: int) -> list[str]`: the k most frequent lowercase words (ties alphabetical).", "def top_words(text,k):\n    import re\n    from collections import Counter\n    c=Counter(re.findall(r'[a-z]+', text.lower()))\n    return [w for w,_ in sorted(c.items(), key=lambda x:(-x[1],x[0]))[:k]]", ["top_words('b a b c a b', 2) == ['b', 'a']", "top_words('', 3) == []", "top_words('X x y', 1) == ['x']"]),
    ("LRU cache", "Implement `class LRU` with `__init__(capacity)`, `get(key)` (None if missing) and `put(key, value)` evicting the least recently used.", "class LRU:\n    def __init__(self,c):\n        from collections import OrderedDict\n        self.c=c; self.d=OrderedDict()\n    def get(self,k):\n        if k not in self.d: return None\n        self.d.move_to_end(k); return self.d[k]\n    def put(self,k,v):\n        self.d[k]=v; self.d.move_to_end(k)\n        if len(self.d)>self.c: self.d.popitem(last=False)", ["(lambda c: (c.put(1,1), c.put(2,2), c.get(1), c.put(3,3), c.get(2)))(LRU(2))[-1] is None", "(lambda c: (c.put('a',1), c.get('a')))(LRU(1))[-1] == 1"]),
    ("Roman numerals", "Write `to_roman(n: int) -> str` for 1 <= n <= 3999.", "def to_roman(n):\n    vals=[(1000,'M'),(900,'CM'),(500,'D'),(400,'CD'),(100,'C'),(90,'XC'),(50,'L'),(40,'XL'),(10,'X'),(9,'IX'),(5,'V'),(4,'IV'),(1,'I')]\n    out=''\n    for v,s in vals:\n        while n>=v: out+=s; n-=v\n    return out", ["to_roman(1994) == 'MCMXCIV'", "to_roman(3999) == 'MMMCMXCIX'", "to_roman(4) == 'IV'"]),
    ("Binary search", "Write `first_ge(xs: list[int], x: int) -> int`: index of the first element >= x in a sorted list (len(xs) if none).", "def first_ge(xs,x):\n    lo,hi=0,len(xs)\n    while lo<hi:\n        m=(lo+hi)//2\n        if xs[m]<x: lo=m+1\n        else: hi=m\n    return lo", ["first_ge([1,3,3,5], 3) == 1", "first_ge([1,2], 9) == 2", "first_ge([], 1) == 0"]),
    ("Flatten nested lists", "Write `flatten(x) -> list` flattening arbitrarily nested lists.", "def flatten(x):\n    out=[]\n    for e in x:\n        out.extend(flatten(e) if isinstance(e,list) else [e])\n    return out", ["flatten([1,[2,[3,[]]],4]) == [1,2,3,4]", "flatten([]) == []"]),
    ("Anagram groups", "Write `group_anagrams(words: list[str]) -> list[list[str]]`: groups in first-seen order, words in input order.", "def group_anagrams(ws):\n    g={}\n    for w in ws: g.setdefault(''.join(sorted(w)),[]).append(w)\n    return list(g.values())", ["group_anagrams(['eat','tea','tan','ate','nat']) == [['eat','tea','ate'],['tan','nat']]", "group_anagrams([]) == []"]),
    ("Matrix spiral", "Write `spiral(m: list[list[int]]) -> list[int]` returning elements in clockwise spiral order.", "def spiral(m):\n    out=[]\n    m=[list(r) for r in m]\n    while m:\n        out+=m.pop(0)\n        m=[list(r) for r in zip(*m)][::-1]\n    return out", ["spiral([[1,2,3],[4,5,6],[7,8,9]]) == [1,2,3,6,9,8,7,4,5]", "spiral([]) == []", "spiral([[1],[2]]) == [1,2]"]),
    ("Dijkstra", "Write `shortest(graph: dict[str, dict[str, int]], a: str, b: str) -> int | None`: shortest path length with non-negative weights.", "def shortest(g,a,b):\n    import heapq\n    d={a:0}; h=[(0,a)]\n    while h:\n        c,u=heapq.heappop(h)\n        if u==b: return c\n        if c>d.get(u,1e18): continue\n        for v,w in g.get(u,{}).items():\n            if c+w<d.get(v,1e18): d[v]=c+w; heapq.heappush(h,(c+w,v))\n    return None", ["shortest({'a':{'b':1,'c':4},'b':{'c':1}}, 'a', 'c') == 2", "shortest({'a':{}}, 'a', 'z') is None", "shortest({}, 'a', 'a') == 0"]),
    ("Parse durations", "Write `seconds(s: str) -> int` parsing strings like '1h30m', '45s', '2h5s'.", "def seconds(s):\n    import re\n    u={'h':3600,'m':60,'s':1}\n    return sum(int(n)*u[k] for n,k in re.findall(r'(\\d+)([hms])', s))", ["seconds('1h30m') == 5400", "seconds('45s') == 45", "seconds('2h5s') == 7205"]),
    ("Moving average", "Write `moving_avg(xs: list[float], k: int) -> list[float]` of each full window of size k.", "def moving_avg(xs,k):\n    return [sum(xs[i:i+k])/k for i in range(len(xs)-k+1)] if k>0 else []", ["moving_avg([1,2,3,4], 2) == [1.5,2.5,3.5]", "moving_avg([1], 2) == []"]),
    ("Validate IPv4", "Write `is_ipv4(s: str) -> bool` (four decimal octets 0-255, no leading zeros).", "def is_ipv4(s):\n    p=s.split('.')\n    return len(p)==4 and all(x.isdigit() and str(int(x))==x and int(x)<=255 for x in p)", ["is_ipv4('192.168.0.1')", "not is_ipv4('256.1.1.1')", "not is_ipv4('01.1.1.1')", "not is_ipv4('1.1.1')"]),
    ("Topological sort", "Write `topo(deps: dict[str, list[str]]) -> list[str]` ordering nodes so dependencies come first (ties alphabetical); raise ValueError on cycles.", "def topo(deps):\n    import heapq\n    nodes=set(deps)|{d for v in deps.values() for d in v}\n    indeg={n:0 for n in nodes}; out_edges={n:[] for n in nodes}\n    for n,ds in deps.items():\n        for d in ds: indeg[n]+=1; out_edges[d].append(n)\n    h=[n for n in nodes if indeg[n]==0]; heapq.heapify(h); res=[]\n    while h:\n        n=heapq.heappop(h); res.append(n)\n        for m in out_edges[n]:\n            indeg[m]-=1\n            if indeg[m]==0: heapq.heappush(h,m)\n    if len(res)!=len(nodes): raise ValueError('cycle')\n    return res", ["topo({'b':['a'],'c':['b','a']}) == ['a','b','c']", "topo({}) == []"]),
    ("Chunk a list", "Write `chunks(xs: list, n: int) -> list[list]` splitting into consecutive chunks of size n (last may be shorter).", "def chunks(xs,n):\n    return [xs[i:i+n] for i in range(0,len(xs),n)]", ["chunks([1,2,3,4,5], 2) == [[1,2],[3,4],[5]]", "chunks([], 3) == []"]),
    ("Caesar cipher", "Write `caesar(s: str, k: int) -> str` shifting letters by k, preserving case and non-letters.", "def caesar(s,k):\n    out=''\n    for c in s:\n        if c.isalpha():\n            b=ord('A') if c.isupper() else ord('a')\n            out+=chr((ord(c)-b+k)%26+b)\n        else: out+=c\n    return out", ["caesar('Hello, World!', 3) == 'Khoor, Zruog!'", "caesar('abc', -1) == 'zab'"]),
    ("Count islands", "Write `islands(grid: list[str]) -> int` counting 4-connected groups of '#'.", "def islands(g):\n    seen=set(); n=0\n    for r in range(len(g)):\n        for c in range(len(g[r])):\n            if g[r][c]=='#' and (r,c) not in seen:\n                n+=1; st=[(r,c)]; seen.add((r,c))\n                while st:\n                    y,x=st.pop()\n                    for dy,dx in ((1,0),(-1,0),(0,1),(0,-1)):\n                        a,b=y+dy,x+dx\n                        if 0<=a<len(g) and 0<=b<len(g[a]) and g[a][b]=='#' and (a,b) not in seen: seen.add((a,b)); st.append((a,b))\n    return n", ["islands(['#.#', '#..', '..#']) == 3", "islands([]) == 0"]),
    ("Dedupe stable", "Write `dedupe(xs: list) -> list` removing duplicates, keeping first occurrences in order.", "def dedupe(xs):\n    seen=set(); out=[]\n    for x in xs:\n        if x not in seen: seen.add(x); out.append(x)\n    return out", ["dedupe([3,1,3,2,1]) == [3,1,2]", "dedupe([]) == []"]),
    ("Longest common prefix", "Write `lcp(words: list[str]) -> str`.", "def lcp(ws):\n    if not ws: return ''\n    p=ws[0]\n    for w in ws[1:]:\n        while not w.startswith(p): p=p[:-1]\n    return p", ["lcp(['flower','flow','flight']) == 'fl'", "lcp([]) == ''", "lcp(['a','b']) == ''"]),
    ("Token bucket", "Implement `class TokenBucket(rate: float, capacity: float)` with `allow(now: float) -> bool` consuming one token if available (starts full).", "class TokenBucket:\n    def __init__(self,rate,cap):\n        self.r=rate; self.c=cap; self.t=cap; self.last=None\n    def allow(self,now):\n        if self.last is not None: self.t=min(self.c,self.t+(now-self.last)*self.r)\n        self.last=now\n        if self.t>=1: self.t-=1; return True\n        return False", ["(lambda b: [b.allow(0), b.allow(0), b.allow(0), b.allow(1)])(TokenBucket(1, 2)) == [True, True, False, True]"]),
    ("CSV column sum", "Write `col_sum(csv_text: str, column: str) -> float` summing a numeric column of a CSV with a header row.", "def col_sum(t,col):\n    import csv, io\n    return sum(float(r[col]) for r in csv.DictReader(io.StringIO(t)))", ["col_sum('a,b\\n1,2\\n3,4\\n', 'b') == 6.0", "col_sum('a\\n', 'a') == 0"]),
    ("Histogram bins", "Write `histogram(xs: list[float], edges: list[float]) -> list[int]` counting values in [e_i, e_{i+1}) (last bin closed).", "def histogram(xs,edges):\n    import bisect\n    out=[0]*(len(edges)-1)\n    for x in xs:\n        if x==edges[-1]: out[-1]+=1\n        elif edges[0]<=x<edges[-1]: out[bisect.bisect_right(edges,x)-1]+=1\n    return out", ["histogram([0,1,1.5,2,3], [0,1,2,3]) == [1,2,2]", "histogram([], [0,1]) == [0]"]),
    ("Inter-arrival times", "Write `iat(ts: list[float]) -> list[float]` returning gaps between sorted timestamps.", "def iat(ts):\n    s=sorted(ts)\n    return [b-a for a,b in zip(s,s[1:])]", ["iat([3,1,2]) == [1,1]", "iat([5]) == []"]),
    ("Retry with backoff", "Write `backoff(attempt: int, base: float = 0.5, cap: float = 8.0) -> float`: exponential delay base*2**attempt capped at cap.", "def backoff(a,base=0.5,cap=8.0):\n    return min(cap, base*2**a)", ["backoff(0) == 0.5", "backoff(3) == 4.0", "backoff(10) == 8.0"]),
]  # fmt: skip


def _check_coding(ref: str, tests: list[str], title: str) -> None:
    ns: dict[str, Any] = {}
    exec(ref, ns)  # our own reference solutions, to prove the tests are right
    for t in tests:
        if not eval(t, ns):
            raise AssertionError(f"coding task {title!r}: test fails on the reference: {t}")


def rows() -> list[dict[str, Any]]:
    """All tasks, checked."""
    out: list[dict[str, Any]] = []
    fixed = {
        "Coin change": _coin_ways(100, [1, 2, 5, 10, 20, 50]),
        "Fibonacci modulo": _fib(90) % 1_000_007,
    }
    for i, (title, prompt, answer, diff) in enumerate(MATH):
        answer = fixed.get(title, answer)
        if isinstance(answer, float) and answer.is_integer():
            answer = int(answer)
        out.append({"id": f"math-{i + 1:02d}", "category": "math", "title": title, "prompt": prompt,
                    "expected_output": str(answer), "rubric": MATH_RUBRIC, "difficulty": diff})  # fmt: skip
    for cat, items in (("research", RESEARCH), ("consulting", CONSULTING)):
        for i, (title, prompt, rubric) in enumerate(items):
            out.append({"id": f"{cat}-{i + 1:02d}", "category": cat, "title": title, "prompt": prompt,
                        "expected_output": None, "rubric": rubric,
                        "difficulty": "hard" if len(rubric) > 3 else "medium"})  # fmt: skip
    for i, (title, prompt, ref, tests) in enumerate(CODING):
        _check_coding(ref, tests, title)
        out.append({"id": f"coding-{i + 1:02d}", "category": "coding", "title": title,
                    "prompt": prompt + " Include the function only.",
                    "expected_output": "\n".join(f"assert {t}" for t in tests),
                    "rubric": ["all asserts pass", "handles the edge cases in the asserts",
                               "readable, no unnecessary complexity"],
                    "difficulty": "medium" if len(ref) > 250 else "easy"})  # fmt: skip
    for r in out:
        r["schema_version"] = SCHEMA_VERSION
    return out


def render() -> str:
    """The JSONL file as text."""
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    text = render()
    if args.check:
        same = args.out.exists() and args.out.read_text(encoding="utf-8") == text
        print("topology_tasks.jsonl is up to date" if same else "topology_tasks.jsonl differs")
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {text.count(chr(10))} tasks to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
