/**
 * A %%mtsql cell's text read as Spark reads SQL (the rules of mt_magic/sql/tokens.py): strings with
 * backslash escapes and doubled quotes, raw r'…' strings, `quoted` names, -- comments, block
 * comments that nest, numbers with Spark's suffixes; keywords are Spark SQL's and our statements'
 * (keywords.json); {{name}} is a notebook variable. The %%mtsql line itself is the magic's.
 */
import { StreamLanguage, StringStream } from '@codemirror/language';

import KEYWORDS from './keywords.json';

interface Reading {
  magic: boolean; // the first line, %%mtsql and its flags, is still to be read
  comments: number; // how deep in nested block comments
  quote: string | null; // the string open across lines: its quote, after 'r' when raw
}

const words = new Set<string>(KEYWORDS);
const NUMBER = /^(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?(?:bd|[lsydf])?(?![\w])/i;
const VARIABLE = /^\{\{\s*[A-Za-z_][A-Za-z0-9_]*\s*\}\}/;

function comment(stream: StringStream, state: Reading): string {
  while (!stream.eol()) {
    if (stream.match('/*')) {
      state.comments++;
    } else if (stream.match('*/')) {
      if (--state.comments === 0) {
        break;
      }
    } else {
      stream.next();
    }
  }
  return 'comment';
}

function string(stream: StringStream, state: Reading): string {
  const raw = state.quote!.length > 1;
  const quote = state.quote!.slice(-1);
  for (let char = stream.next(); char !== undefined; char = stream.next()) {
    if (char === '\\' && !raw) {
      stream.next();
    } else if (char === quote && (raw || !stream.eat(quote))) {
      state.quote = null;
      break;
    }
  }
  return 'string';
}

function token(stream: StringStream, state: Reading): string | null {
  if (state.magic) {
    stream.skipToEnd();
    state.magic = false;
    return 'meta';
  }
  if (state.comments > 0) {
    return comment(stream, state);
  }
  if (state.quote !== null) {
    return string(stream, state);
  }
  if (stream.eatSpace()) {
    return null;
  }
  if (stream.match('--')) {
    stream.skipToEnd();
    return 'comment';
  }
  if (stream.match('/*')) {
    state.comments = 1;
    return comment(stream, state);
  }
  if (stream.match(VARIABLE)) {
    return 'variableName.special';
  }
  const raw = stream.match(/^[rR](?=['"])/);
  const quote = stream.eat(/['"]/);
  if (quote) {
    state.quote = raw ? 'r' + quote : quote;
    return string(stream, state);
  }
  if (stream.match(/^`(?:[^`]|``)*`/)) {
    return null;
  }
  if (stream.match(NUMBER)) {
    return 'number';
  }
  const word = stream.match(/^[A-Za-z_][A-Za-z0-9_]*/) as RegExpMatchArray | null;
  if (word) {
    return words.has(word[0].toUpperCase()) ? 'keyword' : null;
  }
  if (stream.match(/^[-+*/%=<>!&|^~:]+/)) {
    return 'operator';
  }
  stream.next();
  return /[(),;.[\]]/.test(stream.current()) ? 'punctuation' : null;
}

export const mtsql = StreamLanguage.define<Reading>({
  name: 'mtsql',
  startState: () => ({ magic: true, comments: 0, quote: null }),
  copyState: state => ({ ...state }),
  token,
  languageData: { commentTokens: { line: '--', block: { open: '/*', close: '*/' } } }
});

/** The cell is a %%mtsql cell: its first line is the magic's, with or without flags. */
export function isMtsql(firstLine: string): boolean {
  return /^%%mtsql(?:\s|$)/.test(firstLine);
}
